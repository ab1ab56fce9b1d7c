"""ProjectedLSTM: training and inference agree, empty inputs, distinct rows, when XLA is used, bfloat16 in training."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.projected_lstm import ProjectedLSTM


def test_layer_gradients_in_training_mode_equal_inference_mode():
    layer = ProjectedLSTM(8, 4, 3.0, 3.0, go_backwards=True)
    x = tf.random.stateless_normal([3, 5, 6], seed=[1, 2])
    lengths = tf.constant([5, 2, 4])
    layer(x, lengths)
    grads = []
    for training in (False, True):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out, c, h = layer(x, lengths, training=training)
            loss = tf.reduce_sum(out ** 2) + tf.reduce_sum(c) + tf.reduce_sum(h)
        grads.append(tape.gradient(loss, [x] + layer.trainable_weights))
    for a, b in zip(*grads):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-5)


def test_training_mode_takes_a_batch_without_rows():
    layer = ProjectedLSTM(8, 4, 3.0, 3.0)
    x = tf.zeros([0, 5, 6])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, c, h = layer(x, tf.zeros([0], tf.int32), training=True)
        loss = tf.reduce_sum(out) + tf.reduce_sum(c)
    assert (out.shape, c.shape, h.shape) == ((0, 5, 4), (0, 8), (0, 4))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    assert grads[0].shape == x.shape
    for weight, grad in zip(layer.trainable_weights, grads[1:]):
        np.testing.assert_array_equal(grad.numpy(), np.zeros(weight.shape))


@pytest.mark.parametrize("training, distinct", [(False, False), (True, False), (True, True)])
def test_no_time_steps_pass_the_states_through(training, distinct):
    layer = ProjectedLSTM(8, 4, 3.0, 3.0)
    c0 = tf.random.stateless_normal([3, 8], seed=[1, 2])
    h0 = tf.random.stateless_normal([3, 4], seed=[3, 4])
    inputs = tf.zeros([1, 2, 6]) if distinct else tf.zeros([3, 0, 6])
    token_index = tf.zeros([3, 0], tf.int32) if distinct else None
    with tf.GradientTape() as tape:
        tape.watch([c0, h0])
        out, c, h = layer(inputs, tf.zeros([3], tf.int32), initial_state=(c0, h0), training=training,
                          token_index=token_index)
        loss = tf.reduce_sum(c * c) + tf.reduce_sum(h)
    assert out.shape == (3, 0, 4)
    np.testing.assert_array_equal(c.numpy(), c0.numpy())
    np.testing.assert_array_equal(h.numpy(), h0.numpy())
    dc0, dh0 = tape.gradient(loss, [c0, h0])
    np.testing.assert_allclose(dc0.numpy(), 2 * c0.numpy())
    np.testing.assert_array_equal(dh0.numpy(), np.ones([3, 4]))


@pytest.mark.parametrize("go_backwards", [False, True])
def test_distinct_rows_with_an_index_equal_the_gathered_inputs(go_backwards):
    layer = ProjectedLSTM(8, 4, 3.0, 3.0, go_backwards=go_backwards)
    rows = tf.random.stateless_normal([1, 5, 6], seed=[3, 4])
    index = tf.constant([[0, 3, 3, 1, 4], [2, 2, 0, 0, 0], [4, 1, 0, 2, 3]])
    lengths = tf.constant([5, 2, 4])
    dense = layer(tf.gather(rows[0], index), lengths)
    distinct = layer(rows, lengths, token_index=index)
    for a, b in zip(dense, distinct):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6)
    assert np.abs(dense[0].numpy()).max() > 0


def test_xla_by_default_only_for_kernels_that_stay_in_cache():
    assert ProjectedLSTM(1024, 128).uses_xla        # small released size, 2 MiB kernel
    assert not ProjectedLSTM(4096, 512).uses_xla    # original size, 32 MiB kernel
    assert not ProjectedLSTM(8, 4, jit_compile=False).uses_xla


def test_lstm_input_half_uses_bfloat16_in_training_only():
    rng = np.random.default_rng(3)
    inputs = tf.constant(rng.normal(size=(4, 6, 12)), tf.float32)
    lengths = tf.constant([6, 3, 5, 1])
    layers = {dtype: ProjectedLSTM(16, 8, 3.0, 3.0, matmul_dtype=dtype) for dtype in ("float32", "bfloat16")}
    for layer in layers.values():
        layer.build((None, None, 12))
    layers["bfloat16"].set_weights(layers["float32"].get_weights())
    reference = [t.numpy() for t in layers["float32"](inputs, lengths, training=True)]
    inference = [t.numpy() for t in layers["bfloat16"](inputs, lengths, training=False)]
    trained = [t.numpy() for t in layers["bfloat16"](inputs, lengths, training=True)]
    for got_inference, got_trained, want in zip(inference, trained, reference):
        np.testing.assert_allclose(got_inference, want, atol=1e-6)
        np.testing.assert_allclose(got_trained, want, atol=0.02)
    assert not np.allclose(trained[0], reference[0], atol=1e-6)
    assert ProjectedLSTM.from_config(layers["bfloat16"].get_config()).matmul_dtype == "bfloat16"
