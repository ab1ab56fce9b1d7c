"""bilm.ops.stateless_random: under XLA, the numbers of TensorFlow's stateless ops run without it."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.ops import stateless_random

# Seeds as training makes them: small, negative (fold_in's), past 32 bits.
SEEDS = [[1, 7], [-143040582, 3], [2 ** 40, -(2 ** 50)]]


def _tensorflows(seed, x):
    folded = tf.random.experimental.stateless_fold_in(seed, 3)
    return (folded, tf.random.experimental.stateless_fold_in(seed, tf.constant(5, tf.int64)),
            tf.random.stateless_uniform([1001], folded, dtype=tf.float32),
            tf.random.stateless_uniform([4099], seed, dtype=tf.float64),
            tf.nn.experimental.stateless_dropout(x, 0.3, seed=folded))


def _bilms(seed, x):
    folded = stateless_random.fold_in(seed, 3)
    return (folded, stateless_random.fold_in(seed, tf.constant(5, tf.int64)),
            stateless_random.uniform([1001], folded, tf.float32),
            stateless_random.uniform([4099], seed, tf.float64),
            stateless_random.dropout(x, 0.3, folded))


@pytest.mark.parametrize("seed", SEEDS)
def test_compiled_draws_are_tensorflows_draws_bit_for_bit(seed):
    seed = tf.constant(seed, tf.int64)
    x = tf.random.stateless_normal([7, 13], seed=[0, 1])
    expected = _tensorflows(seed, x)
    compiled = tf.function(_bilms, jit_compile=True, autograph=False)(seed, x)
    for name, got, want in zip(("fold_in int32", "fold_in int64", "float32", "float64", "dropout"),
                               compiled, expected):
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
    # Outside XLA they are TensorFlow's functions.
    for got, want in zip(_bilms(seed, x), expected):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_an_int32_seed_draws_as_its_int64_value():
    seed = tf.constant([-5, 9], tf.int32)
    compiled = tf.function(lambda s: stateless_random.uniform([64], s, tf.float64), jit_compile=True)(seed)
    np.testing.assert_array_equal(compiled.numpy(), tf.random.stateless_uniform([64], seed, dtype=tf.float64).numpy())
