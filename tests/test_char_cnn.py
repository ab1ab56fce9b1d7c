"""conv1d_valid: TF's valid 1-D convolution with a faster input gradient."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.char_cnn import conv1d_valid


@pytest.mark.parametrize("width", [1, 3, 7])
def test_conv1d_valid_and_its_gradients_equal_tf_conv1d(width):
    x = tf.random.stateless_normal([4, 9, 5], seed=[1, width])
    kernel = tf.random.stateless_normal([width, 5, 6], seed=[2, width])
    weights = tf.random.stateless_normal([4, 10 - width, 6], seed=[3, width])
    results = []
    for conv in (conv1d_valid, lambda a, b: tf.nn.conv1d(a, b, stride=1, padding="VALID")):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel])
            y = conv(x, kernel)
            loss = tf.reduce_sum(tf.reduce_max(y, axis=1) ** 2) + tf.reduce_sum(y * weights)
        results.append([y] + tape.gradient(loss, [x, kernel]))
    for name, a, b in zip(["outputs", "d_x", "d_kernel"], *results):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
        assert np.abs(b.numpy()).max() > 0, name
