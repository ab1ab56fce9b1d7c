"""The LSTM recurrence for inference: the step-by-step half of the layer, given the input half.

`lstm_recurrence` runs a `tf.while_loop` in the graph; `lstm_recurrence_xla`
the same loop compiled with XLA, with a gradient that runs the hand-written
backward pass of `bilm.ops.lstm_bptt` (fine-tuning through ELMo). Training
uses `bilm.ops.lstm_bptt`'s own forward loop, which also stores what its
backward pass needs.
"""
import tensorflow as tf

from bilm.ops.lstm_bptt import recomputed_gradients
from bilm.ops.lstm_cell import lstm_cell_step, projection_stand_in
from bilm.ops.xla_buckets import padded_size


@tf.function(reduce_retracing=True)
def lstm_recurrence(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                    cell_clip, proj_clip):
    """Runs the LSTM recurrence given the precomputed input half of the gates.

    Args:
        gates_tm: `(time, batch, 4 * units)`, `x W_x + b` in `i, j, f, o`
            order, time-major (the loop reads one step's gates at a time).
        lengths: `(batch,)` valid steps per row.
        c0, h0: `(batch, units)`, `(batch, output_dim)` initial state.
        recurrent_kernel: `(output_dim, 4 * units)`.
        projection_kernel: `(units, output_dim)` or None.
        cell_clip, proj_clip: Python floats or None.

    Returns:
        outputs `(batch, time, output_dim)` (zeros at padded steps), and the
        final `c`, `h` at each row's last valid step.
    """
    time = tf.shape(gates_tm)[0]
    outputs_ta = tf.TensorArray(gates_tm.dtype, size=time, element_shape=h0.shape)

    def step(t, c, h, outputs_ta):
        cell = lstm_cell_step(gates_tm[t], c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip)
        valid = tf.expand_dims(t < lengths, 1)
        c = tf.where(valid, cell.new_c, c)
        h = tf.where(valid, cell.new_h, h)
        outputs_ta = outputs_ta.write(t, tf.where(valid, cell.new_h, tf.zeros_like(cell.new_h)))
        return t + 1, c, h, outputs_ta

    _, c, h, outputs_ta = tf.while_loop(
        lambda t, *_: t < time, step, (tf.constant(0), c0, h0, outputs_ta))
    outputs = tf.transpose(outputs_ta.stack(), [1, 0, 2])
    return outputs, c, h


def lstm_recurrence_xla(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                        cell_clip, proj_clip):
    """`lstm_recurrence` compiled with XLA, for inference.

    XLA compiles once per input shape, so time is padded up to a bucket
    (`padded_size`: a handful of compilations instead of one per sentence
    length); the loop itself stops at the longest row.
    """
    time = tf.shape(gates_tm)[0]
    padded_time = padded_size(time)
    projection_kernel, use_projection = projection_stand_in(projection_kernel, gates_tm.dtype)
    clips = (cell_clip, proj_clip)

    # Autodiff cannot see into an XLA loop, so gradients (e.g. fine-tuning
    # through ELMo) re-run the loop with the hand-written backward pass.
    @tf.custom_gradient
    def recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel):
        padded, c0_, h0_, recurrent, projection = [
            tf.stop_gradient(x) for x in (gates_tm, c0, h0, recurrent_kernel, projection_kernel)]
        padded = tf.pad(padded, [[0, padded_time - time], [0, 0], [0, 0]])
        # An empty batch or sequence has nothing to compile (and XLA's
        # scatter rejects it): zeros out, states unchanged.
        outputs, c, h = tf.cond(
            tf.size(gates_tm) > 0,
            lambda: _compiled_recurrence(padded, lengths, c0_, h0_, recurrent,
                                         projection if use_projection else None, *clips),
            lambda: (tf.zeros([tf.shape(padded)[1], tf.shape(padded)[0], tf.shape(h0_)[1]], padded.dtype),
                     c0_, h0_))

        def grad(d_outputs, d_c, d_h):
            return recomputed_gradients(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                                        *clips, use_projection, d_outputs, d_c, d_h)

        return (outputs[:, :time], c, h), grad

    return recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel)


@tf.function(jit_compile=True, reduce_retracing=True)
def _compiled_recurrence(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                         cell_clip, proj_clip):
    # Outputs live in one zero buffer updated in place (XLA's dynamic
    # update), so steps past the longest row are never run.
    outputs = tf.zeros([tf.shape(gates_tm)[0], tf.shape(h0)[0], tf.shape(h0)[1]], gates_tm.dtype)

    def step(t, c, h, outputs):
        cell = lstm_cell_step(gates_tm[t], c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip)
        valid = tf.expand_dims(t < lengths, 1)
        outputs = tf.tensor_scatter_nd_update(
            outputs, [[t]], tf.where(valid, cell.new_h, tf.zeros_like(cell.new_h))[tf.newaxis])
        return t + 1, tf.where(valid, cell.new_c, c), tf.where(valid, cell.new_h, h), outputs

    _, c, h, outputs = tf.while_loop(
        lambda t, *_: t < tf.reduce_max(lengths), step, (tf.constant(0), c0, h0, outputs),
        maximum_iterations=tf.shape(gates_tm)[0])
    return tf.transpose(outputs, [1, 0, 2]), c, h
