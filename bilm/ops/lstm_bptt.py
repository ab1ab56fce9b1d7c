"""The LSTM recurrence with a hand-written backward pass (BPTT), for training.

Autodiff through `tf.while_loop` computes the weight gradients step by step
(small matmuls plus an accumulation per step). Here the backward loop only
carries the state gradients (two skinny matmuls per step, like the forward
pass) and the weight gradients are large matmuls over all steps, made
after the loop (and outside XLA, whose CPU matmul is slower at these
shapes than oneDNN's, unless the whole training step is compiled:
`bilm.training.arrays.train_step`).
The math is the TF1 `LSTMCell` step of `bilm.ops.lstm_cell`.
"""
from typing import NamedTuple

import tensorflow as tf

from bilm.ops.lstm_cell import lstm_cell_step, projection_stand_in
from bilm.ops.matmul_dtype import matmul


class SavedForBackward(NamedTuple):
    """What the forward loop keeps for the backward one, time-major (see `_forward_pass`)."""
    factors: tf.Tensor
    out_gates: tf.Tensor
    forgets: tf.Tensor
    cell_outputs: tf.Tensor
    projected: tf.Tensor
    previous_h: tf.Tensor


def _unclipped_mask(x, clip):
    # Where a value went through clip_by_value unchanged (TF's min/max
    # gradients pass at the boundary too).
    return tf.cast(tf.logical_and(x >= -clip, x <= clip), x.dtype)


def lstm_recurrence_bptt(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                         cell_clip, proj_clip, jit_compile=False):
    """The LSTM recurrence given the precomputed input half of the gates.

    Args:
        gates_tm: `(time, batch, 4 * units)`, `x W_x + b` in `i, j, f, o`
            order, time-major.
        lengths: `(batch,)` valid steps per row.
        c0, h0: `(batch, units)`, `(batch, output_dim)` initial state.
        recurrent_kernel: `(output_dim, 4 * units)`.
        projection_kernel: `(units, output_dim)` or None.
        cell_clip, proj_clip: Python floats or None.
        jit_compile: compile both loops with XLA (fused elementwise work
            per step; worth it when shapes repeat, as in training).

    Returns:
        outputs `(batch, time, output_dim)` (zeros at padded steps), and the
        final `c`, `h` at each row's last valid step; differentiable with
        respect to `gates_tm`, `c0`, `h0` and both kernels.
    """
    projection_kernel, use_projection = projection_stand_in(projection_kernel, gates_tm.dtype)
    forward, backward = _loop_functions(jit_compile)
    clips = (cell_clip, proj_clip, use_projection)

    @tf.custom_gradient
    def recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel):
        # The gradient is the hand-written one; stop_gradient keeps an outer
        # tape from asking the loops for autodiff bookkeeping (which XLA cannot compile).
        inputs = [tf.stop_gradient(x) for x in (gates_tm, c0, h0, recurrent_kernel, projection_kernel)]
        outputs, c, h, saved = forward(inputs[0], lengths, *inputs[1:], *clips)

        def grad(d_outputs, d_c, d_h):
            return _recurrence_gradients(backward, d_outputs, d_c, d_h, lengths, recurrent_kernel,
                                         projection_kernel, saved, *clips)

        return (outputs, c, h), grad

    return recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel)


def lstm_layer_bptt(inputs_tm, input_kernel, bias, lengths, c0, h0, recurrent_kernel, projection_kernel,
                    cell_clip, proj_clip, matmul_dtype="float32", jit_compile=False):
    """The whole layer for training: the input half of the gates, then the
    recurrence, with one hand-written gradient for both.

    Args:
        inputs_tm: float `(time, batch, input_dim)`, time-major.
        input_kernel: `(input_dim, 4 * units)`; bias: `(4 * units,)`. The
            input half is `inputs_tm @ input_kernel + bias`, its matmul with
            operands of `matmul_dtype` (`bilm.ops.matmul_dtype`).
        The rest as `lstm_recurrence_bptt`.

    Returns:
        As `lstm_recurrence_bptt`; differentiable with respect to
        `inputs_tm`, both states and every weight.

    The gradients of the input kernel, the recurrent kernel and the bias
    all read the gates' gradient `(time * batch, 4 * units)`; one matmul,
    `[inputs, previous_h, 1]^T d_gates`, makes the three of them in one
    pass over it (with bfloat16 operands the input kernel's is its own
    bfloat16 matmul). Against a separate matmul each: 15.5 against 20.5
    ms at training sizes (1280 rows, 128 + 128 + 1 by 4096).
    """
    projection_kernel, use_projection = projection_stand_in(projection_kernel, inputs_tm.dtype)
    forward, backward = _loop_functions(jit_compile)
    clips = (cell_clip, proj_clip, use_projection)

    @tf.custom_gradient
    def layer(inputs_tm, input_kernel, bias, c0, h0, recurrent_kernel, projection_kernel):
        # As in lstm_recurrence_bptt: the gradient is the hand-written one.
        inputs_tm, input_kernel, bias, c0, h0, recurrent_kernel, projection_kernel = [
            tf.stop_gradient(x) for x in (inputs_tm, input_kernel, bias, c0, h0, recurrent_kernel, projection_kernel)]
        shape = tf.shape(inputs_tm)  # (time, batch, input_dim)
        rows = tf.reshape(inputs_tm, [-1, shape[2]])
        units4 = tf.shape(input_kernel)[1]
        gates_tm = tf.reshape(matmul(rows, input_kernel, matmul_dtype) + bias, [shape[0], shape[1], units4])
        outputs, c, h, saved = forward(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel, *clips)

        def grad(d_outputs, d_c, d_h):
            d_gates, dc0, dh0, d_raw_h = backward(d_outputs, d_c, d_h, lengths, recurrent_kernel,
                                                  projection_kernel, saved, *clips)
            d_gates = tf.reshape(d_gates, [-1, units4])
            previous_h = tf.reshape(saved.previous_h, [-1, tf.shape(h0)[1]])
            ones = tf.ones([tf.shape(d_gates)[0], 1], d_gates.dtype)
            if matmul_dtype == "float32":
                d_kernels = _transposed_product(tf.concat([rows, previous_h, ones], axis=1), d_gates)
                d_input_kernel, d_rest = tf.split(d_kernels, [shape[2], -1], axis=0)
                d_rows = _input_rows_gradient(d_gates, input_kernel)
            else:
                d_input_kernel = matmul(rows, d_gates, matmul_dtype, transpose_a=True)
                d_rest = _transposed_product(tf.concat([previous_h, ones], axis=1), d_gates)
                d_rows = matmul(d_gates, input_kernel, matmul_dtype, transpose_b=True)
            d_recurrent, d_bias = d_rest[:-1], d_rest[-1]
            return (tf.reshape(d_rows, shape), d_input_kernel, d_bias, dc0, dh0, d_recurrent,
                    _projection_gradient(saved, d_raw_h, projection_kernel, use_projection))

        return (outputs, c, h), grad

    return layer(inputs_tm, input_kernel, bias, c0, h0, recurrent_kernel, projection_kernel)


def recomputed_gradients(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                         cell_clip, proj_clip, use_projection, d_outputs, d_c, d_h):
    """Gradients of the recurrence's results (given theirs, `d_outputs`,
    `d_c`, `d_h`) with respect to `(gates_tm, c0, h0, recurrent_kernel,
    projection_kernel)`, re-running the forward loop to get what the
    backward pass needs; for forward passes that kept nothing (inference
    under XLA). `projection_kernel` is a `projection_stand_in`."""
    clips = (cell_clip, proj_clip, use_projection)
    *_, saved = _forward_pass(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel, *clips)
    return _recurrence_gradients(_backward_pass, d_outputs, d_c, d_h, lengths, recurrent_kernel,
                                 projection_kernel, saved, *clips)


def _recurrence_gradients(backward, d_outputs, d_c, d_h, lengths, recurrent_kernel, projection_kernel, saved,
                          cell_clip, proj_clip, use_projection):
    """`(d_gates_tm, d_c0, d_h0, d_recurrent_kernel, d_projection_kernel)`:
    the `backward` loop, then the kernels' gradients as matmuls over all steps."""
    d_gates, dc0, dh0, d_raw_h = backward(d_outputs, d_c, d_h, lengths, recurrent_kernel, projection_kernel,
                                          saved, cell_clip, proj_clip, use_projection)
    return (d_gates, dc0, dh0, _transposed_product(saved.previous_h, d_gates),
            _projection_gradient(saved, d_raw_h, projection_kernel, use_projection))


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _input_rows_gradient(d_gates, input_kernel):
    """`d_gates @ input_kernel^T`, under XLA, whose CPU matmul does this
    transposed product faster than oneDNN's (docs/performance.md)."""
    return tf.matmul(d_gates, input_kernel, transpose_b=True)


def _transposed_product(a, b):
    """`a^T b` over all leading axes: `(..., m)`, `(..., n)` -> `(m, n)`."""
    return tf.matmul(tf.reshape(a, [-1, tf.shape(a)[-1]]), tf.reshape(b, [-1, tf.shape(b)[-1]]), transpose_a=True)


def _projection_gradient(saved, d_raw_h, projection_kernel, use_projection):
    """`m^T d_raw_h` over all steps, or zeros for a `projection_stand_in`."""
    if not use_projection:
        return tf.zeros_like(projection_kernel)
    return _transposed_product(saved.cell_outputs, d_raw_h)


def _forward_pass(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                  cell_clip, proj_clip, use_projection):
    """The forward loop; also returns what `_backward_pass` needs, stacked
    time-major.

    The backward step's elementwise work is mostly products of this step's
    activations, so they are formed here, where the activations are at
    hand, and the backward loop only scales them by the incoming gradients:
    - `factors` `(time, batch, 4 * units)`: `dz = [q, q, q, dm] * factors`,
      i.e. `keep * j * i(1 - i)`, `keep * i (1 - j^2)`, `keep * c_prev * f(1 - f)`,
      `tanh_c * o(1 - o)`, where `keep` is 1 where the cell clip passes
      the gradient (0 where it clipped) and `q` is the gradient reaching
      the clipped cell;
    - `out_gates` `(time, batch, units)`: `o (1 - tanh_c^2)`, so that
      `q = dc + dm * out_gates`;
    - `forgets` `(time, batch, units)`: `keep * f`, so that `dc_prev = q * forgets`;
    - with a projection, `cell_outputs` (`m`, for the projection's
      gradient) and, with its clip, `projected` (the projection before
      clipping); empty otherwise;
    - `previous_h` `(time, batch, output_dim)`: the hidden state entering
      each step (for the recurrent kernel's gradient). Past a row's length
      it reads zeros, where every gradient is zero anyway.
    """
    time = tf.shape(gates_tm)[0]
    names = ["factors", "out_gates", "forgets"]
    if use_projection:
        names.append("cell_outputs")
        if proj_clip is not None:
            names.append("projected")

    def step(t, c, h, outputs, arrays):
        cell = lstm_cell_step(gates_tm[t], c, h, recurrent_kernel, projection_kernel if use_projection else None,
                              cell_clip, proj_clip)
        i, j, f, o = cell.gates
        keep = 1.0 if cell_clip is None else _unclipped_mask(cell.raw_c, cell_clip)
        values = {
            "factors": tf.concat([keep * j * i * (1.0 - i), keep * i * (1.0 - j * j), keep * c * f * (1.0 - f),
                                  cell.tanh_c * o * (1.0 - o)], axis=1),
            "out_gates": o * (1.0 - cell.tanh_c * cell.tanh_c),
            "forgets": keep * f,
            "cell_outputs": cell.m,
            "projected": cell.raw_h,
        }
        arrays = {name: array.write(t, values[name]) for name, array in arrays.items()}
        valid = tf.expand_dims(t < lengths, 1)
        c = tf.where(valid, cell.new_c, c)
        h = tf.where(valid, cell.new_h, h)
        outputs = outputs.write(t, tf.where(valid, cell.new_h, tf.zeros_like(cell.new_h)))
        return t + 1, c, h, outputs, arrays

    def array():
        return tf.TensorArray(gates_tm.dtype, size=time)

    _, c, h, outputs, arrays = tf.while_loop(
        lambda t, *_: t < time, step, (tf.constant(0), c0, h0, array(), {name: array() for name in names}))
    outputs_tm = outputs.stack()
    # A known number of steps stays known, so that every layer of a model
    # calls the compiled loops with the same signature (one compilation).
    outputs_tm.set_shape(gates_tm.shape[:2].concatenate(h0.shape[1:]))
    empty = tf.zeros([0], gates_tm.dtype)
    saved = {name: arrays[name].stack() if name in arrays else empty for name in SavedForBackward._fields}
    saved["previous_h"] = tf.concat([h0[tf.newaxis], outputs_tm[:-1]], axis=0)
    return tf.transpose(outputs_tm, [1, 0, 2]), c, h, SavedForBackward(**saved)


def _backward_pass(d_outputs, d_c, d_h, lengths, recurrent_kernel, projection_kernel, saved,
                   cell_clip, proj_clip, use_projection):
    """Gradients of `_forward_pass`'s outputs with respect to `gates_tm`
    (time-major), `c0`, `h0` and, with a projection, the projected output
    before its clip `(time, batch, output_dim)` (for the projection
    kernel's gradient; empty without one). The kernels' gradients are
    matmuls over all steps, left to the caller (outside XLA, where they
    run faster on a CPU)."""
    factors, out_gates, forgets, _, projected, _ = saved
    time = tf.shape(factors)[0]
    dtype = factors.dtype
    d_outputs_tm = tf.transpose(d_outputs, [1, 0, 2])
    recurrent_t = tf.transpose(recurrent_kernel)
    projection_t = tf.transpose(projection_kernel) if use_projection else None

    def back_step(t, dc, dh, d_gates, d_raw_h):
        valid = tf.expand_dims(t < lengths, 1)
        dh_new = tf.where(valid, dh + d_outputs_tm[t], tf.zeros_like(dh))
        if use_projection:
            if proj_clip is not None:
                dh_new = dh_new * _unclipped_mask(projected[t], proj_clip)
            d_raw_h = d_raw_h.write(t, dh_new)
            dm = tf.matmul(dh_new, projection_t)
        else:
            dm = dh_new
        q = tf.where(valid, dc, tf.zeros_like(dc)) + dm * out_gates[t]
        dz = tf.concat([q, q, q, dm], axis=1) * factors[t]
        dh_prev = tf.matmul(dz, recurrent_t) + tf.where(valid, tf.zeros_like(dh), dh)
        dc_prev = tf.where(valid, q * forgets[t], dc)
        return t - 1, dc_prev, dh_prev, d_gates.write(t, dz), d_raw_h

    _, dc0, dh0, d_gates, d_raw_h = tf.while_loop(
        lambda t, *_: t >= 0, back_step,
        (time - 1, d_c, d_h, tf.TensorArray(dtype, size=time),
         tf.TensorArray(dtype, size=time if use_projection else 0)))
    return d_gates.stack(), dc0, dh0, d_raw_h.stack() if use_projection else tf.zeros([0], dtype)


def _loop_functions(jit_compile):
    """The forward and backward loop functions, compiled with XLA or not."""
    return (_FORWARD_XLA, _BACKWARD_XLA) if jit_compile else (_forward_pass, _backward_pass)


_FORWARD_XLA = tf.function(_forward_pass, jit_compile=True, reduce_retracing=True, autograph=False)
_BACKWARD_XLA = tf.function(_backward_pass, jit_compile=True, reduce_retracing=True, autograph=False)
