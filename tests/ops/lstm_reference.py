"""The plain padded LSTM recurrence in a TensorFlow graph loop: the reference the
fast recurrences (`bilm.ops.lstm_bptt`, `bilm.ops.lstm_recurrence`) are tested against."""
import tensorflow as tf

from bilm.ops.lstm_cell import lstm_cell_step


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


