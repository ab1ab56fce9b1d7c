"""The LSTM at inference on a CPU under JAX for a few rows over large kernels, each state in columns.

Where `lstm_bptt.runs_in_columns` (a few rows over a large recurrent kernel), XLA's CPU product runs a step faster
as a kernel's transpose times the state in columns. Here, at inference, the transposes are the ones kept beside the
kernels (`bilm.backend.jax.column_kernels`: made once per kernel value, not in each call), and each step
(`lstm_bptt.column_steps`) takes its rows of the input half as rows and turns them into columns itself, beside the
step's products: no `(time, 4 * units, batch)` copy of the gates is written and read back; no step past the longest
row runs. The arithmetic is the portable code's, in its order (`x W_x + b`, then `+ h W_h`), so the values are the
same to float32 round-off. Figures: docs/performance.md.
"""
import functools

import jax.numpy as jnp
from keras import ops

from bilm.backend.jax.core import scan_up_to
from bilm.backend.jax.lstm_bptt import column_steps
from bilm.ops.lstm_scan import reading_order, take_rows, widened


def lstm_scan_in_columns(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias,
                         projection_kernel=None, cell_clip=None, proj_clip=None, go_backwards=False, token_index=None,
                         input_matmul_dtype="float32", recurrence=None, *, transposes):
    """`bilm.ops.lstm_scan.lstm_scan` (its arguments and results, float32 input products), its steps' products
    from `transposes`: those of the recurrent kernel `(4 * units, output_dim)` and of the projection kernel
    `(output_dim, units)` (or None), which stand for `recurrent_kernel` and `projection_kernel`."""
    del recurrent_kernel, projection_kernel, input_matmul_dtype, recurrence  # the transposes' kernels; float32 steps
    input_kernel, bias = widened(input_kernel), widened(bias)
    valid, order, read = reading_order(inputs, ops.cast(lengths, "int32"), go_backwards, token_index)
    rows = (ops.convert_to_tensor(inputs)[0] if token_index is not None else read)
    gates = jnp.reshape(jnp.reshape(rows, (-1, rows.shape[-1])) @ input_kernel, (*rows.shape[:-1], -1))
    outputs_tm, final_c, final_h = column_steps(
        (cell_clip, proj_clip), read if token_index is not None else gates, jnp.transpose(valid)[..., None],
        ops.cast(initial_c, "float32"), ops.cast(initial_h, "float32"), *transposes,
        gate_rows=gates if token_index is not None else None, bias=bias,
        scan=functools.partial(scan_up_to, count=jnp.max(ops.cast(lengths, "int32"), initial=0)))
    outputs = jnp.transpose(outputs_tm, (1, 0, 2))
    if order is not None:
        outputs = take_rows(outputs, order)
    return outputs, final_c, final_h
