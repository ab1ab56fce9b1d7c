"""The LSTM at inference on a CPU under JAX for a few rows over large kernels, each state in columns.

Where `lstm_bptt.runs_in_columns` (a few rows over a large recurrent kernel), XLA's CPU product runs a step faster
as a kernel's transpose times the state in columns. Here, at inference, the transposes are the ones kept beside the
kernels (`bilm.backend.jax.column_kernels`: made once per kernel value, not in each call), and each step takes its
rows of the input half as rows and turns them into columns itself, beside the step's products: no
`(time, 4 * units, batch)` copy of the gates is written and read back. The arithmetic is the portable code's, in its
order (`x W_x + b`, then `+ h W_h`), so the values are the same to float32 round-off. Figures: docs/performance.md.
"""
import jax.numpy as jnp
from keras import ops

from bilm.backend.jax.core import scan_up_to
from bilm.backend.jax.lstm_bptt import COLUMN_MATH
from bilm.ops.lstm_scan import lstm_cell, reading_order, take_rows, widened


def lstm_scan_in_columns(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel_t, bias,
                         projection_kernel_t=None, cell_clip=None, proj_clip=None, go_backwards=False,
                         token_index=None):
    """`bilm.ops.lstm_scan.lstm_scan` (its arguments and results, float32), given the transposes of the recurrent
    kernel `(4 * units, output_dim)` and of the projection kernel `(output_dim, units)` (or None)."""
    input_kernel, bias = widened(input_kernel), widened(bias)
    valid, order, read = reading_order(inputs, ops.cast(lengths, "int32"), go_backwards, token_index)
    rows = (ops.convert_to_tensor(inputs)[0] if token_index is not None else read)
    gates = jnp.reshape(jnp.reshape(rows, (-1, rows.shape[-1])) @ input_kernel, (*rows.shape[:-1], -1))

    def step(state, step_inputs):
        c, h = state
        x, step_valid = step_inputs  # (batch, 4 * units) or the rows' indices (batch,); (1, batch)
        step_gates = (x if token_index is None else jnp.take(gates, x, axis=0)).T + bias[:, None]
        new_c, new_h = lstm_cell(COLUMN_MATH, step_gates, c, h, recurrent_kernel_t, projection_kernel_t, cell_clip,
                                 proj_clip)
        return (jnp.where(step_valid, new_c, c), jnp.where(step_valid, new_h, h)), jnp.where(step_valid, new_h, 0.0)

    xs = read if token_index is not None else gates
    initial = (ops.cast(initial_c, "float32").T, ops.cast(initial_h, "float32").T)
    (final_c, final_h), outputs_tm = scan_up_to(step, initial, (xs, jnp.transpose(valid)[:, None, :]),
                                                jnp.max(ops.cast(lengths, "int32"), initial=0),
                                                (recurrent_kernel_t.shape[1], valid.shape[0]))
    outputs = jnp.transpose(outputs_tm, (2, 0, 1))  # (time, output_dim, batch) -> (batch, time, output_dim)
    if order is not None:
        outputs = take_rows(outputs, order)
    return outputs, final_c.T, final_h.T
