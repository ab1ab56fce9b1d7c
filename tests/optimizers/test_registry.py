"""The optimizer registry: what it lists, and that one new module is a new optimizer training can use."""
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import bilm.optimizers as optimizers_module
from bilm.optimizers import OPTIMIZERS, checkpoint_optimizer, default_learning_rates, optimizer_class
from bilm.options import OptionsError
from bilm.training.config.settings import training_settings
from bilm.training.run.loop import train
from bilm.training.run.run_directory import saved_optimizer
from training_helpers import checkpoint_arrays, open_data, tiny_options

MOMENTUM_MODULE = textwrap.dedent('''
    import tensorflow as tf

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

        def __init__(self, variables, learning_rate):
            self.learning_rate = learning_rate
            self.steps = tf.Variable(0, dtype=tf.int64, trainable=False)
            self.accumulators = {"iterations": self.steps}
            for name, variable in variables.items():
                self.accumulators[name] = tf.Variable(lambda v=variable: tf.zeros(v.shape, v.dtype),
                                                      trainable=False)

        def slots(self, name):
            return (self.accumulators[name],)

        def update(self, variable, gradient, velocity, gradient_scale=1.0):
            gradient = tf.convert_to_tensor(gradient) * tf.cast(gradient_scale, variable.dtype)
            velocity.assign(0.9 * velocity + gradient)
            return variable.assign_sub(self.learning_rate * velocity)

        def finish_step(self, strategy, gradient_scale):
            strategy.extended.update(self.steps, lambda steps: steps.assign_add(1), group=False)
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


@pytest.mark.slow
def test_an_optimizers_state_is_what_it_declares_whatever_its_class_keeps(
        tmp_path, training_corpus, monkeypatch):
    package = tmp_path / "more_optimizers"
    package.mkdir()
    # Its step count under a key of its own, not declared as counts_steps: a checkpoint would drop it.
    # (A module and name of its own: the package's modules are imported once.)
    (package / "uncounted.py").write_text(MOMENTUM_MODULE.replace('{"iterations": self.steps}',
                                                                  '{"momentum_steps": self.steps}')
                                          .replace('name = "momentum"', 'name = "uncounted"'))
    monkeypatch.setattr(optimizers_module, "__path__", [*optimizers_module.__path__, str(package)])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(OPTIMIZERS, "uncounted", optimizers_module._discover()["uncounted"])
    options = tiny_options(optimizer="uncounted")
    # The step's state is what slot_starts and counts_steps declare (the class's own variables are never made):
    # nothing a checkpoint would drop, on one replica or a strategy's.
    for name, strategy in (("one", None), ("given", tf.distribute.OneDeviceStrategy("/cpu:0"))):
        result = train(options, open_data(options, training_corpus), 1, tmp_path / name, None, max_steps=1,
                       verbose=0, strategy=strategy)
        assert result["step"] == 1
        assert not [key for key in checkpoint_arrays(result["checkpoint"]) if "momentum_steps" in key]


def test_two_optimizers_of_one_name_are_refused(tmp_path, monkeypatch):
    package = tmp_path / "clash"
    package.mkdir()
    (package / "zz_adagrad_again.py").write_text(MOMENTUM_MODULE.replace('name = "momentum"', 'name = "adagrad"'))
    monkeypatch.setattr(optimizers_module, "__path__", [*optimizers_module.__path__, str(package)])
    with pytest.raises(RuntimeError, match="Two optimizers are named 'adagrad'"):
        optimizers_module._discover()
