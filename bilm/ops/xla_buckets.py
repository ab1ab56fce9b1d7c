"""Sizes to pad to before an XLA call, so that XLA compiles a few shapes."""
import tensorflow as tf


def padded_size(size):
    """The size XLA compiles for: a multiple of 16, or of an eighth of the
    next power of two for large sizes (at most ~12% padding, a handful of
    compilations per doubling). `size`: int32 scalar tensor."""
    power = tf.bitwise.left_shift(1, tf.cast(tf.math.ceil(
        tf.math.log(tf.cast(tf.maximum(size, 1), tf.float32)) / tf.math.log(2.0)), tf.int32))
    step = tf.maximum(16, power // 8)
    return (size + step - 1) // step * step
