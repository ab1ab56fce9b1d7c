"""One step of the TF1 `LSTMCell` with projection and clipping, shared by every loop."""
import tensorflow as tf


def lstm_cell_step(gates_t, c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip):
    """One step from the input half of the gates.

    Args:
        gates_t: `(batch, 4 * units)`, `x_t W_x + b` in `i, j, f, o` order.
        c, h: `(batch, units)`, `(batch, output_dim)` state before the step.
        recurrent_kernel: `(output_dim, 4 * units)`.
        projection_kernel: `(units, output_dim)` or None.
        cell_clip, proj_clip: Python floats or None.

    Returns:
        `(gates, raw_c, new_c, raw_h, new_h)`: the activations `[i, j, f, o]`
        `(batch, 4 * units)` (forget bias 1.0 included), the cell before and
        after clipping, the output before and after clipping (before
        masking; without projection both outputs are `o * tanh(new_c)`).
    """
    z = gates_t + tf.matmul(h, recurrent_kernel)
    zi, zj, zf, zo = tf.split(z, 4, axis=1)
    i, j, f, o = tf.sigmoid(zi), tf.tanh(zj), tf.sigmoid(zf + 1.0), tf.sigmoid(zo)
    raw_c = f * c + i * j
    new_c = raw_c if cell_clip is None else tf.clip_by_value(raw_c, -cell_clip, cell_clip)
    raw_h = new_h = o * tf.tanh(new_c)
    if projection_kernel is not None:
        raw_h = tf.matmul(new_h, projection_kernel)
        new_h = raw_h if proj_clip is None else tf.clip_by_value(raw_h, -proj_clip, proj_clip)
    return (i, j, f, o), raw_c, new_c, raw_h, new_h


def projection_stand_in(projection_kernel, dtype):
    """`(kernel, use_projection)`: an empty stand-in for a missing projection,
    so that functions over both kernels keep one signature (its gradient is
    unused)."""
    if projection_kernel is None:
        return tf.zeros([0, 0], dtype), False
    return projection_kernel, True
