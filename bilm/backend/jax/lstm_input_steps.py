"""The LSTM at inference on a CPU under JAX, each step's input half computed in the step.

The portable code (`bilm.ops.lstm_scan.lstm_scan`) first computes the input half of the gates for every step as one
product, `(time * batch, input_dim) @ (input_dim, 4 * units)`, then runs the steps over it. On a CPU that product's
result, four times a layer's units wide, is written out and read back a step at a time, and XLA runs its product
over so many rows slower a row than a step's: here each step computes its own rows' input half beside the
recurrent product, while the state and the kernels stay in cache. The arithmetic is the portable code's, in its
order (`x W_x + b`, then `+ h W_h`), so the values are the same to float32 round-off (the same bytes where XLA's
product sums a row alike at both sizes). Used where no gradient is asked for (`training` false); gradients go
through the portable steps and their hand-written backward pass (`bilm.backend.jax.lstm_bptt`). Figures:
docs/performance.md.
"""
import functools
import math

import jax.numpy as jnp
from keras import ops

from bilm.backend.jax.core import lstm_steps, scan_up_to, scan_valid_steps
from bilm.backend.jax.lstm_bptt import runs_in_columns
from bilm.ops.lstm_scan import lstm_cell, lstm_scan, reading_order, take_rows, widened

# Where the steps pay (`input_in_steps_pays`): batches of at least as many rows as the input half's kernel has (its
# streaming from memory a step then costs less than writing out and reading back the gates), or of at least
# `MIN_ROWS_SMALL_KERNELS` rows where the input and recurrent kernels together take at most `SMALL_KERNELS_BYTES`
# (they stay in cache); elsewhere one product over every step is faster (docs/performance.md).
MIN_ROWS_SMALL_KERNELS = 3
SMALL_KERNELS_BYTES = 4 << 20


def lstm_scan_inputs_in_steps(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias,
                              projection_kernel=None, cell_clip=None, proj_clip=None, go_backwards=False,
                              token_index=None, input_matmul_dtype="float32", recurrence=None):
    """`lstm_scan` (its arguments and results), each step's input half computed in the step where that pays
    (`input_in_steps_pays`); other batches, those whose steps run in columns (`lstm_bptt.runs_in_columns`), and
    bfloat16 input products take `lstm_scan` over JAX's steps (`core.lstm_steps`, in place of `recurrence`). The
    steps here and JAX's portable steps run no step past the longest row (`core.scan_up_to`, `core.scan_valid_steps`);
    steps in columns made here (a bfloat16 kernel's, whose transposes are not kept) run every step."""
    del recurrence  # JAX's steps, run only up to the longest row
    batch = (inputs if token_index is None else token_index).shape[0]
    if (input_matmul_dtype != "float32" or runs_in_columns(batch, recurrent_kernel.shape)
            or not input_in_steps_pays(batch, input_kernel.shape, recurrent_kernel.shape)):
        return lstm_scan(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias,
                         projection_kernel, cell_clip, proj_clip, go_backwards, token_index, input_matmul_dtype,
                         functools.partial(lstm_steps, steps_scan=scan_valid_steps))
    input_kernel, bias = widened(input_kernel), widened(bias)
    recurrent_kernel, projection_kernel = widened(recurrent_kernel), widened(projection_kernel)
    valid, order, read = reading_order(inputs, ops.cast(lengths, "int32"), go_backwards, token_index)
    if token_index is None:
        def input_half(x):
            return x @ input_kernel + bias
    else:  # the steps' rows picked from the distinct rows, then their input half
        distinct = ops.convert_to_tensor(inputs)[0]

        def input_half(rows):
            return jnp.take(distinct, rows, axis=0) @ input_kernel + bias

    def step(state, step_inputs):
        c, h = state
        x, step_valid = step_inputs
        new_c, new_h = lstm_cell(ops, input_half(x), c, h, recurrent_kernel, projection_kernel, cell_clip,
                                 proj_clip)
        return (jnp.where(step_valid, new_c, c), jnp.where(step_valid, new_h, h)), jnp.where(step_valid, new_h, 0.0)

    initial = (ops.cast(initial_c, "float32"), ops.cast(initial_h, "float32"))
    (final_c, final_h), outputs_tm = scan_up_to(step, initial, (read, jnp.transpose(valid)[..., None]),
                                                jnp.max(ops.cast(lengths, "int32"), initial=0))
    outputs = jnp.transpose(outputs_tm, (1, 0, 2))
    if order is not None:
        outputs = take_rows(outputs, order)
    return outputs, final_c, final_h


def input_in_steps_pays(batch, input_kernel_shape, recurrent_kernel_shape):
    """Whether steps of `batch` rows compute their input half faster in the step than one product over every step
    does, on a CPU, for kernels of these shapes (the rule above `MIN_ROWS_SMALL_KERNELS`)."""
    kernels_bytes = 4 * (math.prod(input_kernel_shape) + math.prod(recurrent_kernel_shape))
    return batch >= input_kernel_shape[0] or (batch >= MIN_ROWS_SMALL_KERNELS and kernels_bytes <= SMALL_KERNELS_BYTES)
