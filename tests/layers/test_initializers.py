"""The original recipe's initialisers: their distributions, from large seeded draws."""
import math

import keras
import numpy as np
import pytest

from bilm.layers.initializers import char_cnn_kernel_initializer, dense_initializer

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
