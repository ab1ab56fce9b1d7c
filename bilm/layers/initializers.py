"""The original recipe's initialisers (the initialisers of bilm-tf's training code), and constant starts, made in
NumPy.

`Draw` takes its seed from Python's `random` when made, as Keras's
unseeded initializers do, so a model built under
`keras.utils.set_random_seed(seed)` or
`bilm.utils.python_random.seeded_python_random(seed)` gets the same
weights again, and the same on every backend. `Filled` (`host_values`
of Keras's zeros, ones and constants) gives a constant start. Their
values are NumPy's, not a backend op's: JAX compiles a program for each
shape a Keras initializer makes, random or constant (docs/performance.md),
which made a new JAX training run's set-up and `bilm.load` seconds longer.
"""
import math
import random

import keras
import numpy as np


@keras.saving.register_keras_serializable(package="bilm")
class Draw(keras.initializers.Initializer):
    """`U(-scale, scale)` (`distribution="uniform"`) or `N(0, scale)` (`"normal"`, not truncated), drawn by NumPy's
    `default_rng(seed)`; `seed` None: one from Python's `random`, taken when made. Each call draws the same
    values for a shape (as a seeded Keras initializer)."""

    def __init__(self, distribution, scale, seed=None):
        if distribution not in ("uniform", "normal"):
            raise ValueError(f"distribution is 'uniform' or 'normal', got {distribution!r}")
        self.distribution, self.scale = distribution, float(scale)
        self.seed = random.getrandbits(63) if seed is None else int(seed)

    def __call__(self, shape, dtype=None):
        rng = np.random.default_rng(self.seed)
        shape = tuple(int(dim) for dim in shape)
        if self.distribution == "uniform":
            values = rng.uniform(-self.scale, self.scale, shape)
        else:
            values = rng.normal(0.0, self.scale, shape)
        return _in_dtype(values.astype(np.float32), dtype)

    def get_config(self):
        return {"distribution": self.distribution, "scale": self.scale, "seed": self.seed}


@keras.saving.register_keras_serializable(package="bilm")
class Filled(keras.initializers.Initializer):
    """Every value `value`, from NumPy (Keras's `Constant` of a scalar, `Zeros` or `Ones`)."""

    def __init__(self, value=0.0):
        self.value = float(value)

    def __call__(self, shape, dtype=None):
        return _in_dtype(np.full(tuple(int(dim) for dim in shape), self.value, np.float32), dtype)

    def get_config(self):
        return {"value": self.value}


def _in_dtype(values, dtype):
    """float32 `values` as they are (NumPy), or cast to another `dtype` (None: float32) by the backend."""
    dtype = keras.backend.standardize_dtype(dtype or "float32")
    return values if dtype == "float32" else keras.ops.cast(values, dtype)


def host_values(initializer):
    """`initializer` (a Keras initializer or its name), or where it is Keras's `Zeros`, `Ones` or a scalar
    `Constant`, the `Filled` that makes the same values in NumPy."""
    initializer = keras.initializers.get(initializer)
    if isinstance(initializer, keras.initializers.Zeros):
        return Filled(0.0)
    if isinstance(initializer, keras.initializers.Ones):
        return Filled(1.0)
    if type(initializer) is keras.initializers.Constant and np.ndim(initializer.value) == 0:
        return Filled(initializer.value)
    return initializer


def uniform(limit):
    """U(-limit, limit): the char and token tables, the LSTMs' kernels."""
    return Draw("uniform", limit)


def glorot_uniform(fan_in, fan_out):
    """U(-sqrt(6 / (fan_in + fan_out)), +...): Keras's `glorot_uniform` for a `(fan_in, fan_out)` kernel."""
    return Draw("uniform", math.sqrt(6.0 / (fan_in + fan_out)))


def char_cnn_kernel_initializer(activation, width, char_dim):
    """U(-0.05, 0.05) for relu; N(0, sqrt(1 / (width * char_dim))) for tanh."""
    if activation == "relu":
        return Draw("uniform", 0.05)
    return Draw("normal", math.sqrt(1.0 / (width * char_dim)))


def dense_initializer(n_in):
    """N(0, sqrt(1 / n_in)): highway and projection kernels."""
    return Draw("normal", math.sqrt(1.0 / n_in))


def softmax_initializer(projection_dim, seed=None):
    """N(0, 1 / sqrt(projection_dim)): training's softmax table, drawn from the run's seed on every backend."""
    return Draw("normal", 1.0 / math.sqrt(projection_dim), seed)
