"""The stateless random numbers of a training step on TensorFlow, under the names every backend's `random`
exports (`bilm.backend.jax.random`, `bilm.backend.torch.random` compute the same numbers there).

A seed is TensorFlow's int64 `(2,)` stateless seed. The numbers are
`bilm.ops.stateless_random`'s: TensorFlow's own, in a function compiled with
XLA as outside one.
"""
import tensorflow as tf

from bilm.ops import stateless_random

# A seed's shape and dtype as a network input (`build_bilm`'s `dropout_seed`): TensorFlow's int64 `(2,)` stateless seed.
SEED_SHAPE, SEED_DTYPE = (2,), "int64"


def seed_words(first, second):
    """The seed `(first, second)`: int64 `(2,)`, each an int or an int scalar tensor (sign-extended)."""
    return tf.stack([tf.cast(first, tf.int64), tf.cast(second, tf.int64)])


def fold_in(seed, data):
    """`tf.random.experimental.stateless_fold_in(seed, data)` with int64 `data`: the new seed, int64 `(2,)`."""
    return stateless_random.fold_in(tf.cast(seed, tf.int64), tf.cast(data, tf.int64))


def fold_in_int32(seed, data):
    """`stateless_fold_in(seed, data)` with int32 `data`, its int32 seed sign-extended: int64 `(2,)`."""
    return tf.cast(stateless_random.fold_in(tf.cast(seed, tf.int64), tf.cast(data, tf.int32)), tf.int64)


def uniform(seed, shape):
    """`tf.random.stateless_uniform(shape, seed)`, float32 in `[0, 1)`."""
    return stateless_random.uniform(shape, seed)


def dropout(x, rate, seed):
    """`tf.nn.experimental.stateless_dropout(x, rate, seed)` for a Python float `rate` in `[0, 1)`."""
    if rate == 0:
        return x
    return stateless_random.dropout(x, rate, seed)
