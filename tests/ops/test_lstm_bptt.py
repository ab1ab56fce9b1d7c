"""lstm_recurrence_bptt and lstm_layer_bptt: the hand-written backward pass equals autodiff of the forward loop."""
import functools

import numpy as np
import pytest
import tensorflow as tf

from bilm.ops.lstm_bptt import lstm_layer_bptt, lstm_recurrence_bptt
from bilm.ops.matmul_dtype import matmul
from lstm_reference import lstm_recurrence


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
    np.testing.assert_allclose(out_b.numpy(), out_a.numpy(), atol=1e-5)
    for name, a, b in zip(["gates_tm", "c0", "h0", "recurrent", "projection"], grads_a, grads_b):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=2e-5, err_msg=name)
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
    np.testing.assert_allclose(out_b.numpy(), out_a.numpy(), atol=1e-5)
    for name, a, b in zip(["inputs", "input_kernel", "bias", "c0", "h0", "recurrent", "projection"],
                          grads_a, grads_b):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-5 * max(1.0, np.abs(a.numpy()).max()),
                                   err_msg=name)
        assert np.abs(a.numpy()).max() > 0, name


def test_stacked_layers_keep_a_known_number_of_steps():
    # The second layer reads the first's outputs; with the number of steps
    # known in both, both call the compiled loops with one signature (one
    # trace and one XLA compilation in a training run).
    rng = np.random.default_rng(2)
    batch, time, units, projection = 3, 9, 5, 7
    lengths = tf.constant([9, 4, 1])
    kernels = [tf.constant(rng.normal(size=shape) * 0.3, tf.float32)
               for shape in ((projection, 4 * units), (4 * units,), (projection, 4 * units), (units, projection))]
    state = (tf.zeros([batch, units]), tf.zeros([batch, projection]))

    @tf.function(autograph=False)
    def two_layers(inputs_tm):
        outputs = []
        for _ in range(2):
            out, _, _ = lstm_layer_bptt(inputs_tm, *kernels[:2], lengths, *state, *kernels[2:], 3.0, 3.0)
            outputs.append(out)
            inputs_tm = tf.transpose(out, [1, 0, 2])
        return outputs

    graph_outputs = two_layers.get_concrete_function(tf.TensorSpec([time, batch, projection])).structured_outputs
    assert [out.shape.as_list() for out in graph_outputs] == [[batch, time, projection]] * 2
