"""One step of the TF1 `LSTMCell` with projection and clipping, shared by every loop."""
from typing import NamedTuple

import tensorflow as tf

from bilm.ops.matmul_dtype import kernel_matmul


class CellStep(NamedTuple):
    """What one step computes, all `(batch, ...)`.

    `gates`: the activations `(i, j, f, o)`, each `(batch, units)` (forget
    bias 1.0 included); `raw_c`, `new_c`: the cell before and after
    clipping; `tanh_c`: `tanh(new_c)`; `m`: `o * tanh_c`, the cell output
    before projection; `raw_h`, `new_h`: the output before and after
    clipping (before masking; without projection both are `m`).
    """
    gates: tuple
    raw_c: tf.Tensor
    new_c: tf.Tensor
    tanh_c: tf.Tensor
    m: tf.Tensor
    raw_h: tf.Tensor
    new_h: tf.Tensor


def lstm_cell_step(gates_t, c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip, matmul=kernel_matmul):
    """One step from the input half of the gates.

    Args:
        gates_t: `(batch, 4 * units)`, `x_t W_x + b` in `i, j, f, o` order.
        c, h: `(batch, units)`, `(batch, output_dim)` state before the step.
        recurrent_kernel: `(output_dim, 4 * units)`.
        projection_kernel: `(units, output_dim)` or None.
        cell_clip, proj_clip: Python floats or None.
        matmul: the products with the kernels, `(x, kernel) -> x @ kernel`
            in float32 (`kernel_matmul`, or
            `bilm.ops.lowbit_matmul.inference_kernel_matmul` at inference).

    The kernels are float32, or bfloat16 for inference (each product then
    takes bfloat16 operands, see `bilm.ops.matmul_dtype.kernel_matmul`);
    everything else is float32.

    Returns:
        A `CellStep`.
    """
    z = gates_t + matmul(h, recurrent_kernel)
    zi, zj, zf, zo = tf.split(z, 4, axis=1)
    i, j, f, o = tf.sigmoid(zi), tf.tanh(zj), tf.sigmoid(zf + 1.0), tf.sigmoid(zo)
    raw_c = f * c + i * j
    new_c = raw_c if cell_clip is None else tf.clip_by_value(raw_c, -cell_clip, cell_clip)
    tanh_c = tf.tanh(new_c)
    raw_h = new_h = m = o * tanh_c
    if projection_kernel is not None:
        raw_h = matmul(m, projection_kernel)
        new_h = raw_h if proj_clip is None else tf.clip_by_value(raw_h, -proj_clip, proj_clip)
    return CellStep((i, j, f, o), raw_c, new_c, tanh_c, m, raw_h, new_h)


def projection_stand_in(projection_kernel, dtype):
    """`(kernel, use_projection)`: an empty stand-in for a missing projection,
    so that functions over both kernels keep one signature (its gradient is
    unused)."""
    if projection_kernel is None:
        return tf.zeros([0, 0], dtype), False
    return projection_kernel, True
