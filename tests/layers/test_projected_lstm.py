"""ProjectedLSTM: the hand-written backward pass equals autodiff of the forward loop."""
import functools

import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.ops.lstm_recurrence import lstm_recurrence
from bilm.ops.lstm_bptt import lstm_layer_bptt, lstm_recurrence_bptt
from bilm.ops.matmul_dtype import matmul


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("units, projection, cell_clip, proj_clip", [
    (8, 5, 0.5, 0.3),     # both clips active on these values
    (8, 5, None, None),
    (8, 5, None, 0.3),    # projection clip only
    (6, None, 0.8, None),  # no projection
])
def test_bptt_gradients_equal_autodiff(units, projection, cell_clip, proj_clip, jit_compile):
    rng = np.random.default_rng(0)
    batch, time = 4, 6
    output_dim = projection or units
    gates_tm = tf.constant(rng.normal(size=(time, batch, 4 * units)), tf.float32)  # time-major
    lengths = tf.constant([6, 3, 0, 5])
    c0 = tf.constant(rng.normal(size=(batch, units)), tf.float32)
    h0 = tf.constant(rng.normal(size=(batch, output_dim)), tf.float32)
    w_h = tf.constant(rng.normal(size=(output_dim, 4 * units)), tf.float32)
    w_p = tf.constant(rng.normal(size=(units, projection)), tf.float32) if projection else None
    weights = [rng.normal(size=s).astype(np.float32) for s in ((batch, time, output_dim), (batch, units),
                                                                (batch, output_dim))]

    def gradients(recurrence):
        sources = [gates_tm, c0, h0, w_h] + ([w_p] if projection else [])
        with tf.GradientTape() as tape:
            tape.watch(sources)
            results = recurrence(gates_tm, lengths, c0, h0, w_h, w_p, cell_clip, proj_clip)
            loss = sum(tf.reduce_sum(r * w) for r, w in zip(results, weights))
        return results, tape.gradient(loss, sources)

    (out_a, *_), grads_a = gradients(lstm_recurrence.python_function)
    (out_b, *_), grads_b = gradients(functools.partial(lstm_recurrence_bptt, jit_compile=jit_compile))
    np.testing.assert_allclose(out_b.numpy(), out_a.numpy(), atol=1e-6)
    for name, a, b in zip(["gates_tm", "c0", "h0", "recurrent", "projection"], grads_a, grads_b):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-5, err_msg=name)
        assert np.abs(a.numpy()).max() > 0, name


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("projection, matmul_dtype", [(5, "float32"), (None, "float32"), (5, "bfloat16")])
def test_layer_bptt_gradients_equal_autodiff(projection, matmul_dtype, jit_compile):
    # The input half and the recurrence under one hand-written gradient
    # (the kernels' gradients from one matmul) against autodiff of the
    # same ops: the input half's matmul with `matmul_dtype` operands, then
    # the graph recurrence.
    rng = np.random.default_rng(1)
    batch, time, input_dim, units = 4, 6, 7, 8
    output_dim = projection or units
    lengths = tf.constant([6, 3, 0, 5])
    inputs_tm = tf.constant(rng.normal(size=(time, batch, input_dim)), tf.float32)
    sources = [inputs_tm] + [tf.constant(rng.normal(size=shape), tf.float32) for shape in (
        (input_dim, 4 * units), (4 * units,), (batch, units), (batch, output_dim), (output_dim, 4 * units))]
    if projection:
        sources.append(tf.constant(rng.normal(size=(units, projection)), tf.float32))
    weights = [rng.normal(size=s).astype(np.float32) for s in ((batch, time, output_dim), (batch, units),
                                                                (batch, output_dim))]

    def autodiff_layer(inputs_tm, input_kernel, bias, lengths, c0, h0, *kernels_and_clips):
        rows = tf.reshape(inputs_tm, [time * batch, input_dim])
        gates_tm = tf.reshape(matmul(rows, input_kernel, matmul_dtype) + bias, [time, batch, 4 * units])
        return lstm_recurrence.python_function(gates_tm, lengths, c0, h0, *kernels_and_clips)

    def gradients(layer):
        with tf.GradientTape() as tape:
            tape.watch(sources)
            x, w, b, c0, h0, w_h, *w_p = sources
            results = layer(x, w, b, lengths, c0, h0, w_h, w_p[0] if w_p else None, 0.5, 0.3)
            loss = sum(tf.reduce_sum(r * w) for r, w in zip(results, weights))
        return results, tape.gradient(loss, sources)

    (out_a, *_), grads_a = gradients(autodiff_layer)
    (out_b, *_), grads_b = gradients(functools.partial(lstm_layer_bptt, matmul_dtype=matmul_dtype,
                                                       jit_compile=jit_compile))
    np.testing.assert_allclose(out_b.numpy(), out_a.numpy(), atol=1e-6)
    for name, a, b in zip(["inputs", "input_kernel", "bias", "c0", "h0", "recurrent", "projection"],
                          grads_a, grads_b):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-5 * max(1.0, np.abs(a.numpy()).max()),
                                   err_msg=name)
        assert np.abs(a.numpy()).max() > 0, name


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


@pytest.mark.parametrize("go_backwards, projection", [(False, 4), (True, 4), (False, None)])
def test_xla_recurrence_equals_the_graph_recurrence(go_backwards, projection):
    # Time 5 is padded to 8 inside; an empty row keeps its initial state.
    x = tf.random.stateless_normal([4, 5, 6], seed=[5, 6])
    lengths = tf.constant([5, 2, 0, 4])
    output_dim = projection or 8
    state = [tf.random.stateless_normal([4, 8], seed=[7, 8]),
             tf.random.stateless_normal([4, output_dim], seed=[9, 1])]
    results, weights = [], None
    for jit_compile in (False, True):
        layer = ProjectedLSTM(8, projection, 0.5, 0.3, go_backwards=go_backwards, jit_compile=jit_compile)
        layer.build(x.shape)
        if weights is None:  # large enough that both clips act
            weights = [np.random.default_rng(0).normal(size=w.shape).astype(np.float32) for w in layer.weights]
        layer.set_weights(weights)
        assert layer.uses_xla is jit_compile
        results.append(layer(x, lengths, state))
    for a, b in zip(*results):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6)
    np.testing.assert_array_equal(results[1][1].numpy()[2], state[0].numpy()[2])
    assert results[1][0].shape == (4, 5, output_dim)
    for empty in (x[:0], x[:, :0]):  # no rows, no steps
        n = empty.shape[0]
        out, c, h = layer(empty, tf.zeros([n], tf.int32), [s[:n] for s in state])
        assert out.shape == tuple(empty.shape[:2]) + (output_dim,)
        np.testing.assert_array_equal(c.numpy(), state[0].numpy()[:n])


def test_xla_by_default_only_for_kernels_that_stay_in_cache():
    assert ProjectedLSTM(1024, 128).uses_xla        # small released size, 2 MiB kernel
    assert not ProjectedLSTM(4096, 512).uses_xla    # original size, 32 MiB kernel
    assert not ProjectedLSTM(8, 4, jit_compile=False).uses_xla


def test_xla_time_buckets_cover_the_length_with_little_padding():
    from bilm.ops.xla_buckets import padded_size
    times = np.arange(1, 1100)
    buckets = np.array([int(padded_size(tf.constant(int(t)))) for t in times])
    assert np.all(buckets >= times) and np.all(buckets % 16 == 0)
    assert np.all(buckets[times > 128] <= times[times > 128] * 1.25)
    assert len(np.unique(buckets)) < 40  # few shapes to compile
