"""add_bias: x + bias, with the bias gradient as a matmul."""
import numpy as np
import tensorflow as tf

from bilm.ops.bias_add import add_bias


def test_value_and_gradients_equal_tf_autodiff():
    x = tf.random.stateless_normal([37, 5], seed=[0, 1])
    bias = tf.Variable(tf.random.stateless_normal([5], seed=[0, 2]))
    upstream = tf.random.stateless_normal([37, 5], seed=[0, 3])
    results = []
    for op in (add_bias, lambda a, b: a + b):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x, bias)
            loss = tf.reduce_sum(y * upstream)
        results.append([y] + tape.gradient(loss, [x, bias]))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)
    assert np.abs(results[1][2].numpy()).max() > 0


def test_no_rows_gives_a_zero_bias_gradient():
    bias = tf.Variable(tf.ones([3]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(add_bias(tf.zeros([0, 3]), bias))
    np.testing.assert_array_equal(tape.gradient(loss, bias).numpy(), np.zeros(3))
