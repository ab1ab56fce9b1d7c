"""The optimizer registry: what it lists, and that one new module is a new optimizer training can use."""
import textwrap

import numpy as np
import pytest

import bilm.optimizers as optimizers_module
from bilm.optimizers import OPTIMIZERS, checkpoint_optimizer, default_learning_rates, optimizer_class
from bilm.options import OptionsError
from bilm.training.config.settings import training_settings
from bilm.training.run.loop import train
from bilm.training.run.run_directory import saved_optimizer
from training_helpers import checkpoint_arrays, open_data, tiny_options

MOMENTUM_MODULE = textwrap.dedent('''
    from bilm.optimizers.base import Optimizer


    class Momentum(Optimizer):
        name = "momentum"
        default_learning_rate = 0.05
        description = "heavy ball"
        slots_per_variable = 1
        slot_starts = {"velocity": 0.0}
        counts_steps = True

        @classmethod
        def values_update(cls, gradient, slots, learning_rate, taken, iterations):
            velocity = 0.9 * slots["velocity"] + gradient
            return learning_rate * velocity, {"velocity": velocity}
''')


def test_the_registry_lists_each_optimizer_with_what_it_owns():
    assert list(OPTIMIZERS) == ["adagrad", "adam"]  # the original recipe's first
    assert default_learning_rates() == {"adagrad": 0.2, "adam": 0.002}
    assert [OPTIMIZERS[name].slots_per_variable for name in OPTIMIZERS] == [1, 2]
    assert checkpoint_optimizer({"optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE": []}) == "adam"
    assert checkpoint_optimizer({"model/x/.ATTRIBUTES/VARIABLE_VALUE": []}) == "adagrad"
    with pytest.raises(OptionsError, match=r"'optimizer' must be one of \['adagrad', 'adam'\], got 'sgd'"):
        optimizer_class("sgd")


@pytest.mark.slow
def test_one_new_module_is_an_optimizer_training_uses(tmp_path, training_corpus, monkeypatch):
    package = tmp_path / "more_optimizers"
    package.mkdir()
    (package / "momentum.py").write_text(MOMENTUM_MODULE)
    monkeypatch.setattr(optimizers_module, "__path__", [*optimizers_module.__path__, str(package)])
    monkeypatch.syspath_prepend(str(tmp_path))
    found = optimizers_module._discover()
    assert sorted(found) == ["adagrad", "adam", "momentum"]
    monkeypatch.setitem(OPTIMIZERS, "momentum", found["momentum"])

    options = tiny_options(optimizer="momentum")
    del options["learning_rate"]
    assert training_settings(options)[1].learning_rate == 0.05  # its own default
    data = open_data(options, training_corpus)
    first = train(options, data, 1, tmp_path / "ckpt", None, max_steps=2, verbose=0)
    arrays = checkpoint_arrays(first["checkpoint"])
    assert arrays["optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE"] == 2
    assert saved_optimizer(first["checkpoint"]) == "momentum"
    velocities = [value for name, value in arrays.items() if name.startswith("optimizer/") and value.ndim == 2]
    assert velocities and any(np.abs(v).max() > 0 for v in velocities)
    # A restart keeps the optimizer it finds in the checkpoint.
    resumed = train(options, data, 1, tmp_path / "ckpt", None, max_steps=1, restart_ckpt_file=first["checkpoint"],
                    verbose=0)
    assert checkpoint_arrays(resumed["checkpoint"])["optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE"] == 3


def test_two_optimizers_of_one_name_are_refused(tmp_path, monkeypatch):
    package = tmp_path / "clash"
    package.mkdir()
    (package / "zz_adagrad_again.py").write_text(MOMENTUM_MODULE.replace('name = "momentum"', 'name = "adagrad"'))
    monkeypatch.setattr(optimizers_module, "__path__", [*optimizers_module.__path__, str(package)])
    with pytest.raises(RuntimeError, match="Two optimizers are named 'adagrad'"):
        optimizers_module._discover()
