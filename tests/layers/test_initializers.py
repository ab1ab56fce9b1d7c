"""The original recipe's initialisers: their distributions, from large seeded draws; their values NumPy's, so a
network built from one seed has the same weights on every backend."""
import math

import keras
import numpy as np
import pytest

from backend_processes import json_result, run_on_backend
from bilm.layers.initializers import Draw, Filled, char_cnn_kernel_initializer, dense_initializer, host_values

SHAPE = (400, 50)


@pytest.fixture(autouse=True)
def seeded():
    keras.utils.set_random_seed(0)


def test_relu_char_cnn_kernels_are_uniform_in_plus_minus_0_05():
    values = np.asarray(char_cnn_kernel_initializer("relu", 3, 16)(SHAPE))
    assert -0.05 <= values.min() < -0.049 and 0.049 < values.max() <= 0.05
    assert values.std() == pytest.approx(0.1 / math.sqrt(12), rel=0.03)  # U(a, b): (b - a) / sqrt(12)


@pytest.mark.parametrize("width, char_dim", [(1, 16), (7, 4)])
def test_tanh_char_cnn_kernels_are_normal_with_stddev_sqrt_1_over_width_times_char_dim(width, char_dim):
    stddev = math.sqrt(1.0 / (width * char_dim))
    values = np.asarray(char_cnn_kernel_initializer("tanh", width, char_dim)(SHAPE))
    assert abs(values.mean()) < 0.03 * stddev
    assert values.std() == pytest.approx(stddev, rel=0.03)


@pytest.mark.parametrize("n_in", [4, 100])
def test_dense_kernels_are_normal_with_stddev_sqrt_1_over_n_in(n_in):
    stddev = math.sqrt(1.0 / n_in)
    values = np.asarray(dense_initializer(n_in)(SHAPE))
    assert abs(values.mean()) < 0.03 * stddev
    assert values.std() == pytest.approx(stddev, rel=0.03)
    # Not truncated: a normal draw of 20,000 values reaches beyond 3.5 standard deviations.
    assert np.abs(values).max() > 3.5 * stddev


def test_a_draw_is_a_function_of_its_seed_and_shape_and_two_unseeded_ones_differ():
    draw = Draw("uniform", 0.5, seed=7)
    first = draw((3, 4))
    assert first.dtype == np.float32 and np.array_equal(first, draw((3, 4)))
    assert np.array_equal(first, Draw.from_config(draw.get_config())((3, 4)))
    assert not np.array_equal(Draw("uniform", 0.5)((3, 4)), Draw("uniform", 0.5)((3, 4)))
    with pytest.raises(ValueError, match="'uniform' or 'normal'"):
        Draw("truncated", 1.0)


def test_kerass_constant_starts_are_made_in_numpy_with_the_same_values():
    for given, value in [("zeros", 0.0), ("ones", 1.0), (keras.initializers.Constant(-2.0), -2.0)]:
        made = host_values(given)
        assert isinstance(made, Filled) and made.value == value
        values = made((3, 2))
        assert isinstance(values, np.ndarray) and values.dtype == np.float32
        np.testing.assert_array_equal(values, keras.ops.convert_to_numpy(keras.initializers.get(given)((3, 2))))
        assert Filled.from_config(made.get_config()).value == value
    # Anything else is left as it is: a constant of many values, a draw.
    for other in (keras.initializers.Constant(np.arange(2.0)), Draw("normal", 1.0)):
        assert host_values(other) is other


# The digests of networks built from one seed (char and token inputs), in this process on TensorFlow and in a
# process of its own on JAX and PyTorch.
WEIGHT_DIGESTS = """
import hashlib
import keras
from bilm.models.functional_bilm import build_bilm
from bilm.options import load_options
from bilm.presets import get_preset
from bilm.utils.python_random import seeded_python_random


def weight_digests():
    digests = {}
    for name, options in [("chars", get_preset("tiny")), ("tokens", {"lstm": get_preset("tiny")["lstm"]})]:
        with seeded_python_random(3):
            network = build_bilm(load_options(options), n_token_vocab=None if "char_cnn" in options else 50,
                                 layout="training")
        digest = hashlib.sha256()
        for variable in network.weights:
            digest.update(variable.path.encode() + keras.ops.convert_to_numpy(variable.value).tobytes())
        digests[name] = digest.hexdigest()
    return digests
"""


@pytest.mark.slow
def test_a_network_built_from_one_seed_has_the_same_weights_on_every_backend():
    # Keras's random initializers draw with each backend's own generator (and on JAX compile a program a shape).
    here = {}
    exec(WEIGHT_DIGESTS, here)
    digests = {"tensorflow": here["weight_digests"]()}
    for backend in ("jax", "torch"):
        code = WEIGHT_DIGESTS + "\nimport json\nprint(json.dumps(weight_digests()))\n"
        digests[backend] = json_result(run_on_backend(backend, code))
    assert digests["jax"] == digests["tensorflow"] and digests["torch"] == digests["tensorflow"], digests
