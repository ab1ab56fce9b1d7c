"""padded_size: XLA's time buckets cover every length with little padding and few shapes."""
import numpy as np
import tensorflow as tf

from bilm.ops.xla_buckets import padded_size


def test_xla_time_buckets_cover_the_length_with_little_padding():
    times = np.arange(1, 1100)
    buckets = np.array([int(padded_size(tf.constant(int(t)))) for t in times])
    assert np.all(buckets >= times) and np.all(buckets % 16 == 0)
    assert np.all(buckets[times > 128] <= times[times > 128] * 1.25)
    assert len(np.unique(buckets)) < 40  # few shapes to compile
