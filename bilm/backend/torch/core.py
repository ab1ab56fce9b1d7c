"""The control flow that Keras's backends shape each their own way: here `keras.ops.scan` takes outputs of any
shape, so a step's outputs are only what it outputs; and the LSTM's steps are torch's own loop (`lstm_steps`),
the portable recurrence's arithmetic without `keras.ops`' dispatch around each of a step's small ops (eager
PyTorch runs them one by one)."""
import torch
from keras import ops


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`."""
    del output_width  # outputs of any shape
    return ops.scan(step, initial, xs)


def lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
               proj_clip):
    """`bilm.ops.lstm_scan.lstm_steps` (its arguments and results) in torch ops: each value as the portable
    steps compute it on PyTorch, op for op, so the same bytes and gradients."""
    recurrent_kernel, projection_kernel = (None if kernel is None else ops.convert_to_tensor(kernel)
                                           for kernel in (recurrent_kernel, projection_kernel))
    c, h, outputs = initial_c, initial_h, []
    for gates, valid in zip(torch.unbind(gates_tm), torch.unbind(valid_tm)):
        zi, zj, zf, zo = torch.chunk(gates + torch.matmul(h, recurrent_kernel), 4, dim=-1)
        new_c = torch.sigmoid(zf + 1.0) * c + torch.sigmoid(zi) * torch.tanh(zj)
        if cell_clip is not None:
            new_c = torch.clip(new_c, -cell_clip, cell_clip)
        new_h = torch.sigmoid(zo) * torch.tanh(new_c)
        if projection_kernel is not None:
            new_h = torch.matmul(new_h, projection_kernel)
            if proj_clip is not None:
                new_h = torch.clip(new_h, -proj_clip, proj_clip)
        c, h = torch.where(valid, new_c, c), torch.where(valid, new_h, h)
        outputs.append(torch.where(valid, new_h, torch.zeros_like(new_h)))
    if not outputs:  # no time steps
        return initial_h.new_zeros((0, *initial_h.shape)), c, h
    return torch.stack(outputs), c, h
