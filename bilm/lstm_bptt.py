"""The LSTM recurrence with a hand-written backward pass (BPTT), for training.

Autodiff through `tf.while_loop` computes the weight gradients step by step
(small matmuls plus an accumulation per step). Here the backward loop only
carries the state gradients (two skinny matmuls per step, like the forward
pass) and the weight gradients are one large matmul each over all steps.
The math is the TF1 `LSTMCell` of `bilm.lstm.lstm_recurrence`; the two are
compared in `tests/test_lstm.py`.
"""
import tensorflow as tf

from bilm.lstm_cell import lstm_cell_step, projection_stand_in


def _clip_passes(x, clip):
    # Where a value went through clip_by_value unchanged (TF's min/max
    # gradients pass at the boundary too).
    return tf.cast(tf.logical_and(x >= -clip, x <= clip), x.dtype)


def lstm_recurrence_bptt(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                         cell_clip, proj_clip, jit_compile=False):
    """Same arguments and results as `bilm.lstm.lstm_recurrence`; differentiable
    with respect to `gates_tm`, `c0`, `h0` and both kernels. `jit_compile`
    compiles both loops with XLA (fused elementwise work per step; worth it
    when shapes repeat, as in training)."""
    projection_kernel, use_projection = projection_stand_in(projection_kernel, gates_tm.dtype)
    forward = _FORWARD_XLA if jit_compile else _FORWARD
    backward = _BACKWARD_XLA if jit_compile else _BACKWARD
    clips = (cell_clip, proj_clip, use_projection)

    @tf.custom_gradient
    def recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel):
        # The gradient is the hand-written one; stop_gradient keeps an outer
        # tape from asking the loops for autodiff bookkeeping (which XLA cannot compile).
        inputs = [tf.stop_gradient(x) for x in (gates_tm, c0, h0, recurrent_kernel, projection_kernel)]
        outputs, c, h, saved = forward(inputs[0], lengths, *inputs[1:], *clips)

        def grad(d_outputs, d_c, d_h):
            return backward(d_outputs, d_c, d_h, lengths, c0, h0, recurrent_kernel, projection_kernel,
                            saved, *clips)

        return (outputs, c, h), grad

    return recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel)


def recomputed_gradients(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                         cell_clip, proj_clip, use_projection, d_outputs, d_c, d_h):
    """Gradients of `lstm_recurrence`'s results (given theirs, `d_outputs`,
    `d_c`, `d_h`) with respect to `(gates_tm, c0, h0, recurrent_kernel,
    projection_kernel)`, re-running the forward loop to get what the
    backward pass needs; for forward passes that kept nothing (inference
    under XLA). `projection_kernel` is a `projection_stand_in`."""
    clips = (cell_clip, proj_clip, use_projection)
    *_, saved = _forward_pass(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel, *clips)
    return _backward_pass(d_outputs, d_c, d_h, lengths, c0, h0, recurrent_kernel, projection_kernel,
                          saved, *clips)


def _forward_pass(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                  cell_clip, proj_clip, use_projection):
    """The forward loop; also returns what `_backward_pass` needs, stacked
    time-major: gate activations, cells before and after clipping/masking,
    carried hidden states and the projection before clipping."""
    time = tf.shape(gates_tm)[0]
    dtype = gates_tm.dtype

    def array():
        return tf.TensorArray(dtype, size=time)

    def step(t, c, h, outputs, gates, raw_cells, cells, hiddens, projected):
        activations, raw_c, new_c, raw_h, new_h = lstm_cell_step(
            gates_tm[t], c, h, recurrent_kernel, projection_kernel if use_projection else None,
            cell_clip, proj_clip)
        valid = tf.expand_dims(t < lengths, 1)
        c = tf.where(valid, new_c, c)
        h = tf.where(valid, new_h, h)
        return (t + 1, c, h,
                outputs.write(t, tf.where(valid, new_h, tf.zeros_like(new_h))),
                gates.write(t, tf.concat(activations, axis=1)),
                raw_cells.write(t, raw_c), cells.write(t, c), hiddens.write(t, h),
                projected.write(t, raw_h))

    _, c, h, outputs, *saved = tf.while_loop(
        lambda t, *_: t < time, step,
        (tf.constant(0), c0, h0, array(), array(), array(), array(), array(), array()))
    return tf.transpose(outputs.stack(), [1, 0, 2]), c, h, tuple(array.stack() for array in saved)


def _backward_pass(d_outputs, d_c, d_h, lengths, c0, h0, recurrent_kernel, projection_kernel,
                   saved, cell_clip, proj_clip, use_projection):
    """Gradients of `_forward_pass`'s outputs with respect to `(gates_tm, c0,
    h0, recurrent_kernel, projection_kernel)`; the first time-major too."""
    gates, raw_cells, cells, hiddens, projected = saved
    time = tf.shape(gates)[0]
    dtype = gates.dtype
    d_outputs_tm = tf.transpose(d_outputs, [1, 0, 2])
    # States entering each step: the initial state, then the carried ones.
    previous_c = tf.concat([c0[tf.newaxis], cells[:-1]], axis=0)
    previous_h = tf.concat([h0[tf.newaxis], hiddens[:-1]], axis=0)
    recurrent_t = tf.transpose(recurrent_kernel)
    projection_t = tf.transpose(projection_kernel) if use_projection else None

    def back_step(t, dc, dh, d_gates, d_raw_h):
        valid = tf.expand_dims(t < lengths, 1)
        dh_new = tf.where(valid, dh + d_outputs_tm[t], tf.zeros_like(dh))
        dc_new = tf.where(valid, dc, tf.zeros_like(dc))
        i, j, f, o = tf.split(gates[t], 4, axis=1)
        raw_c = raw_cells[t]
        new_c = raw_c if cell_clip is None else tf.clip_by_value(raw_c, -cell_clip, cell_clip)
        tanh_c = tf.tanh(new_c)
        if use_projection:
            if proj_clip is not None:
                dh_new = dh_new * _clip_passes(projected[t], proj_clip)
            d_raw_h = d_raw_h.write(t, dh_new)
            dm = tf.matmul(dh_new, projection_t)
        else:
            dm = dh_new
        dc_total = dc_new + dm * o * (1.0 - tanh_c * tanh_c)
        if cell_clip is not None:
            dc_total = dc_total * _clip_passes(raw_c, cell_clip)
        dz = tf.concat([
            dc_total * j * i * (1.0 - i),
            dc_total * i * (1.0 - j * j),
            dc_total * previous_c[t] * f * (1.0 - f),
            dm * tanh_c * o * (1.0 - o),
        ], axis=1)
        dh_prev = tf.matmul(dz, recurrent_t) + tf.where(valid, tf.zeros_like(dh), dh)
        dc_prev = dc_total * f + tf.where(valid, tf.zeros_like(dc), dc)
        return t - 1, dc_prev, dh_prev, d_gates.write(t, dz), d_raw_h

    _, dc0, dh0, d_gates, d_raw_h = tf.while_loop(
        lambda t, *_: t >= 0, back_step,
        (time - 1, d_c, d_h, tf.TensorArray(dtype, size=time),
         tf.TensorArray(dtype, size=time if use_projection else 0)))
    d_gates = d_gates.stack()
    units4 = tf.shape(d_gates)[2]
    flat_d_gates = tf.reshape(d_gates, [-1, units4])
    d_recurrent = tf.matmul(tf.reshape(previous_h, [-1, tf.shape(previous_h)[2]]), flat_d_gates,
                            transpose_a=True)
    if use_projection:
        o = gates[..., 3 * units4 // 4:]
        new_c = raw_cells if cell_clip is None else tf.clip_by_value(raw_cells, -cell_clip, cell_clip)
        m = o * tf.tanh(new_c)
        d_raw_h = d_raw_h.stack()
        d_projection = tf.matmul(tf.reshape(m, [-1, tf.shape(m)[2]]),
                                 tf.reshape(d_raw_h, [-1, tf.shape(d_raw_h)[2]]), transpose_a=True)
    else:
        d_projection = tf.zeros_like(projection_kernel)
    return d_gates, dc0, dh0, d_recurrent, d_projection


_FORWARD = _forward_pass
_BACKWARD = _backward_pass
_FORWARD_XLA = tf.function(_forward_pass, jit_compile=True, reduce_retracing=True)
_BACKWARD_XLA = tf.function(_backward_pass, jit_compile=True, reduce_retracing=True)
