"""TensorFlow's stateless random streams, the same numbers under XLA as without it.

A function compiled with XLA draws other numbers than TensorFlow's own
kernels from the same seed: XLA turns a negative seed into its Philox key
and counter differently, and turns random bits into floats from other bits
of them. A training step compiled whole would then drop other units and
sample other negatives than the same step uncompiled. These functions give
the numbers of `tf.random.experimental.stateless_fold_in`,
`tf.random.stateless_uniform` and `tf.nn.experimental.stateless_dropout`
(Philox, which TensorFlow's kernels use on a CPU and a GPU) in both: outside
XLA they are those functions; while a function compiled with XLA is traced
(`bilm.ops.placement.compiling_with_xla`) they derive the key and counter
from the seed as TensorFlow's kernels do, draw raw bits (which XLA and
TensorFlow make alike from the same key and counter), and turn them into
floats as TensorFlow's kernels do.
"""
import tensorflow as tf

from bilm.ops.placement import compiling_with_xla

# `tf.random.Algorithm.PHILOX`, and the key TensorFlow scrambles a seed with
# (its `random_ops_util._philox_scramble_seed`).
PHILOX = 1
_SCRAMBLE_KEY = 0x02461E293EC8F720


def fold_in(seed, data):
    """`tf.random.experimental.stateless_fold_in(seed, data)`: int `(2,)`,
    the dtype of `data` (an int32 or int64 scalar)."""
    if not compiling_with_xla():
        return tf.random.experimental.stateless_fold_in(seed, data)
    data = tf.convert_to_tensor(data)
    unsigned = tf.uint32 if data.dtype == tf.int32 else tf.uint64
    return tf.stack([tf.bitcast(random_bits(seed, [], unsigned), data.dtype), data])


def uniform(shape, seed, dtype=tf.float32):
    """`tf.random.stateless_uniform(shape, seed, dtype=dtype)` in `[0, 1)`,
    float32 or float64."""
    if not compiling_with_xla():
        return tf.random.stateless_uniform(shape, seed=seed, dtype=dtype)
    dtype = tf.as_dtype(dtype)
    if dtype == tf.float32:
        # TensorFlow's float from 32 bits: the low 23 as the mantissa of [1, 2), less 1.
        mantissa = tf.bitwise.bitwise_and(random_bits(seed, shape, tf.uint32), 0x7FFFFF)
        return tf.cast(mantissa, tf.float32) * 2.0 ** -23
    if dtype == tf.float64:
        # From 64 bits (low word first): the low 20 bits of the low word,
        # then the high word, as the mantissa.
        bits = random_bits(seed, shape, tf.uint64)
        low = tf.bitwise.bitwise_and(bits, 0xFFFFF)
        mantissa = tf.bitwise.bitwise_or(tf.bitwise.left_shift(low, tf.constant(32, tf.uint64)),
                                         tf.bitwise.right_shift(bits, tf.constant(32, tf.uint64)))
        return tf.cast(mantissa, tf.float64) * 2.0 ** -52
    raise ValueError(f"uniform draws float32 or float64. Received: dtype={dtype.name}")


def dropout(x, rate, seed):
    """`tf.nn.experimental.stateless_dropout(x, rate, seed)` for a Python
    float `rate` in `[0, 1)`: `x / (1 - rate)` where a uniform draw of the
    shape of `x` is at least `rate`, else 0."""
    if not compiling_with_xla():
        return tf.nn.experimental.stateless_dropout(x, rate, seed=seed)
    if rate == 0:
        return x
    x = tf.convert_to_tensor(x)
    scaled = x * tf.constant(1 / (1 - rate), x.dtype)
    keep = uniform(tf.shape(x), seed, x.dtype) >= rate
    return tf.where(keep, scaled, tf.zeros_like(scaled))


def random_bits(seed, shape, dtype=tf.uint32):
    """The raw Philox bits, uint32 or uint64, that TensorFlow's stateless
    ops draw from `seed` (int32 or int64 `(2,)`), under XLA or not."""
    key, counter = key_and_counter(seed)
    return tf.raw_ops.StatelessRandomUniformFullIntV2(shape=shape, key=key, counter=counter, alg=PHILOX,
                                                       dtype=dtype)


def key_and_counter(seed):
    """`(key (1,), counter (2,))`, uint64: the Philox key and counter
    TensorFlow's kernels derive from `seed`. The seed's words are taken
    bit for bit (XLA's cast of a negative int64 to uint64 does not)."""
    seed = tf.bitcast(tf.cast(seed, tf.int64), tf.uint64)
    mix = tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=[4], key=tf.constant([_SCRAMBLE_KEY], tf.uint64), counter=seed, alg=PHILOX, dtype=tf.uint32)
    words = tf.cast(mix, tf.uint64)
    pairs = tf.bitwise.bitwise_or(words[0::2], tf.bitwise.left_shift(words[1::2], tf.constant(32, tf.uint64)))
    return pairs[:1], tf.stack([tf.constant(0, tf.uint64), pairs[1]])
