"""bilm.backend.jax.random: on JAX, the numbers of TensorFlow's stateless ops from the same seed, bit for bit."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

from bilm.backend.jax import random as jax_random

# Seeds as training makes them: small, negative (fold_in's), past 32 bits.
SEEDS = [[1, 7], [-143040582, 3], [2 ** 40, -(2 ** 50)]]


def _as_int64(words):
    """uint32 `(4,)` seed words as TensorFlow's int64 `(2,)` seed."""
    words = np.asarray(words).astype(np.uint64)
    return (words[0::2] | (words[1::2] << np.uint64(32))).view(np.int64)


def _tensorflows(seed, x):
    folded = tf.random.experimental.stateless_fold_in(seed, 3)  # int32 data: an int32 seed
    return (tf.cast(folded, tf.int64), tf.random.experimental.stateless_fold_in(seed, tf.constant(-5, tf.int64)),
            tf.random.stateless_uniform([1001], folded, dtype=tf.float32),
            tf.random.stateless_uniform([4099], seed, dtype=tf.float64),
            tf.nn.experimental.stateless_dropout(x, 0.3, seed=folded))


def _jaxs(seed, x):
    folded = jax_random.fold_in_int32(seed, 3)
    high, low = jax_random.uniform_float64_mantissas(seed, 4099)
    return (folded, jax_random.fold_in(seed, -5), jax_random.uniform(folded, (1001,)), (high, low),
            jax_random.dropout(x, 0.3, folded))


# Compiled with jax.jit as in a training step, and once op by op (a layer called outside a compiled function).
@pytest.mark.parametrize("seed, compiled", [*((seed, True) for seed in SEEDS), (SEEDS[1], False)])
def test_draws_are_tensorflows_bit_for_bit(seed, compiled):
    x = np.random.default_rng(0).normal(size=(7, 33)).astype(np.float32)
    want = [t.numpy() for t in _tensorflows(tf.constant(seed, tf.int64), tf.constant(x))]
    draw = jax.jit(_jaxs) if compiled else _jaxs
    folded, folded64, uniform, (high, low), dropped = draw(jax_random.seed_words(*seed), jnp.asarray(x))
    np.testing.assert_array_equal(_as_int64(folded), want[0])
    np.testing.assert_array_equal(_as_int64(folded64), want[1])
    np.testing.assert_array_equal(np.asarray(uniform), want[2])
    mantissas = np.asarray(high).astype(np.float64) * 2.0 ** 32 + np.asarray(low).astype(np.float64)
    np.testing.assert_array_equal(mantissas * 2.0 ** -52, want[3])
    np.testing.assert_array_equal(np.asarray(dropped), want[4])
    assert 0.2 < np.mean(want[4] == 0) < 0.4  # the masks drop units: the comparison is not of zeros


def test_words_of_a_seed_sign_extend_as_tensorflow_casts_an_int32_seed():
    np.testing.assert_array_equal(_as_int64(jax_random.seed_words(-1, 2 ** 33 + 5)), [-1, 2 ** 33 + 5])
    traced = jax.jit(lambda a, b: jax_random.seed_words(a, b))(jnp.int32(-7), jnp.uint32(4_000_000_000))
    np.testing.assert_array_equal(_as_int64(traced), [-7, 4_000_000_000])


def test_philox_counter_carries_into_its_high_words():
    # Blocks past a low word of 2^32 - 1 carry into the next words, as a 128-bit counter does: the block after
    # the carry is the block drawn from the carried counter directly.
    key = jnp.asarray([5, 6], jnp.uint32)
    counter = jnp.asarray([0xFFFFFFFF, 0xFFFFFFFF, 9, 0], jnp.uint32)
    words = np.asarray(jax_random.philox_words(key, counter, (8,)))
    carried = np.asarray(jax_random.philox_words(key, jnp.asarray([0, 0, 10, 0], jnp.uint32), (4,)))
    np.testing.assert_array_equal(words[4:], carried)
    assert not np.array_equal(words[:4], carried)
