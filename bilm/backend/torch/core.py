"""The control flow that Keras's backends shape each their own way: here `keras.ops.scan` takes outputs of any
shape, so a step's outputs are only what it outputs; and the LSTM's steps are torch's own loop (`lstm_steps`),
the portable recurrence's arithmetic without `keras.ops`' dispatch around each of a step's small ops (eager
PyTorch runs them one by one); on a CPU, at a few rows over a large kernel and without gradients, in columns."""
import types

import torch
from keras import ops

from bilm.ops.lstm_scan import lstm_cell

# The functions `lstm_cell` computes with, as torch's own (`keras.ops` computes the same values through them).
TORCH_MATH = types.SimpleNamespace(matmul=torch.matmul, sigmoid=torch.sigmoid, tanh=torch.tanh, clip=torch.clip,
                                   split=lambda x, n, axis: torch.chunk(x, n, dim=axis))
# The same with each state and gate in columns, `(width, batch)`: `matmul(h, kernel_t)` is `kernel_t @ h` for a
# kernel's transpose, and `split` cuts the columns' rows.
COLUMN_MATH = types.SimpleNamespace(matmul=lambda h, kernel_t: kernel_t @ h, sigmoid=torch.sigmoid, tanh=torch.tanh,
                                    clip=torch.clip, split=lambda x, n, axis: torch.chunk(x, n, dim=0))
# Where no gradient is taken, batches of this many rows over a recurrent kernel of at least this many values (the
# original size's 512 x 16384) run their steps in columns: torch's CPU matmul takes their products faster with the
# state on the second axis; the small size's (128 x 4096) it took as fast or faster as they are (measured:
# docs/performance.md).
COLUMN_BATCH_SIZES = range(16, 65)
COLUMN_MIN_KERNEL_VALUES = 1 << 23


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`."""
    del output_width  # outputs of any shape
    return ops.scan(step, initial, xs)


def lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
               proj_clip):
    """`bilm.ops.lstm_scan.lstm_steps` (its arguments and results) in torch ops: the same `lstm_cell` on torch's
    own functions, each value as the portable steps compute it on PyTorch, so the same bytes and gradients;
    where `_column_steps` runs (no gradient recorded, `COLUMN_BATCH_SIZES` rows over a large recurrent kernel, on a
    CPU), the same values to float32 round-off."""
    recurrent_kernel, projection_kernel = (None if kernel is None else ops.convert_to_tensor(kernel)
                                           for kernel in (recurrent_kernel, projection_kernel))
    if not len(gates_tm):  # no time steps
        return initial_h.new_zeros((0, *initial_h.shape)), initial_c, initial_h
    if (gates_tm.shape[1] in COLUMN_BATCH_SIZES and recurrent_kernel.numel() >= COLUMN_MIN_KERNEL_VALUES
            and not torch.is_grad_enabled() and gates_tm.device.type == "cpu"):
        return _column_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                             proj_clip)
    return _loop(TORCH_MATH, gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                 proj_clip)


def _column_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                  proj_clip):
    """`lstm_steps` (its arguments and results) with each state in columns (`COLUMN_MATH`): the same values to
    float32 round-off (the products sum in other orders)."""
    kernels = [None if kernel is None else kernel.t().contiguous() for kernel in (recurrent_kernel, projection_kernel)]
    outputs, c, h = _loop(COLUMN_MATH, gates_tm.transpose(1, 2), valid_tm.transpose(1, 2), initial_c.t(),
                          initial_h.t(), *kernels, cell_clip, proj_clip)
    return outputs.transpose(1, 2), c.t(), h.t()


def _loop(math, gates_tm, valid_tm, c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip):
    """The steps over the time axis (one or more) in `math`'s layout (`TORCH_MATH`: rows, `COLUMN_MATH`: columns,
    the kernels then transposed): `(outputs_tm, final c, final h)`, a row's state unchanged and its output zeros
    past its length."""
    outputs = []
    for gates, valid in zip(torch.unbind(gates_tm), torch.unbind(valid_tm)):
        new_c, new_h = lstm_cell(math, gates, c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip)
        c, h = torch.where(valid, new_c, c), torch.where(valid, new_h, h)
        outputs.append(torch.where(valid, new_h, 0.0))
    return torch.stack(outputs), c, h
