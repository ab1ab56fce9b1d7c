"""The control flow that Keras's backends shape each their own way: here `keras.ops.scan` takes outputs of any
shape, so a step's outputs are only what it outputs; and the LSTM's steps (`lstm_steps`) are, where no gradient is
recorded on a CPU, bilm's native recurrence (`bilm.ops.native.portable_kernels`: the loop and products of
TensorFlow's op, on the tensors' memory), elsewhere torch's own loop: the portable recurrence's arithmetic without
`keras.ops`' dispatch around each of a step's small ops (eager PyTorch runs them one by one)."""
import types

import keras
import numpy as np
import torch
from keras import ops

from bilm.ops.lstm_scan import gates_and_bias, lstm_cell, widened
from bilm.ops.native import portable_kernels

# The functions `lstm_cell` computes with, as torch's own (`keras.ops` computes the same values through them).
TORCH_MATH = types.SimpleNamespace(matmul=torch.matmul, sigmoid=torch.sigmoid, tanh=torch.tanh, clip=torch.clip,
                                   split=lambda x, n, axis: torch.chunk(x, n, dim=axis))


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`."""
    del output_width  # outputs of any shape
    return ops.scan(step, initial, xs)


def lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
               proj_clip, gate_index=None, bias=None):
    """`bilm.ops.lstm_scan.lstm_steps` (its arguments and results) in torch ops: the same `lstm_cell` on torch's
    own functions, each value as the portable steps compute it on PyTorch, so the same bytes and gradients;
    where the native recurrence runs (`_native_steps`, which reads the rows `gate_index` picks in place and adds
    the bias as it reads them), the same values to float32 round-off, each row's the same bytes at any number of
    rows beside it."""
    recurrent_kernel, projection_kernel, bias = (None if x is None else ops.convert_to_tensor(x)
                                                 for x in (recurrent_kernel, projection_kernel, bias))
    if not len(valid_tm):  # no time steps
        return initial_h.new_zeros((0, *initial_h.shape)), initial_c, initial_h
    steps = _native_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                          proj_clip, gate_index, bias)
    if steps is not None:
        return steps
    return _loop(gates_and_bias(gates_tm, gate_index, bias), valid_tm, initial_c, initial_h,
                 widened(recurrent_kernel), widened(projection_kernel), cell_clip, proj_clip)


def records_gradient(*tensors):
    """Whether autograd records a call of `tensors` (nests of tensors, variables or None): gradients are enabled and
    one of them requires a gradient. A frozen model's call in a training step (its weights' `requires_grad` false,
    as Keras sets a non-trainable variable's, its inputs ids) records none, so its native paths may run."""
    if not torch.is_grad_enabled():
        return False
    return any(getattr(x.value if isinstance(x, keras.Variable) else x, "requires_grad", False)
               for x in keras.tree.flatten(tensors))


def _native_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                  proj_clip, gate_index, bias):
    """`lstm_steps` by `bilm.ops.native.portable_kernels` on the tensors' memory, where no gradient is recorded
    (`records_gradient`), every tensor is on a CPU and `steps_or_none` runs; else None. bfloat16 kernels are passed
    as their bits (the library's bfloat16 products, TensorFlow's op's), not widened."""
    tensors = (gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, gate_index, bias)
    if records_gradient(tensors) or any(x is not None and x.device.type != "cpu" for x in tensors):
        return None
    *arrays, gate_index, bias = (None if x is None else _array(x) for x in tensors)
    steps = portable_kernels.steps_or_none(*arrays, cell_clip, proj_clip, gate_index=gate_index, bias=bias)
    return None if steps is None else tuple(torch.from_numpy(x) for x in steps)


def _array(tensor):
    """A CPU tensor's memory as a NumPy array; a bfloat16 tensor's as its bits (uint16, which NumPy has)."""
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def _loop(gates_tm, valid_tm, c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip):
    """The steps over the time axis (one or more) in torch's functions (`TORCH_MATH`): `(outputs_tm, final c,
    final h)`, a row's state unchanged and its output zeros past its length."""
    outputs = []
    for gates, valid in zip(torch.unbind(gates_tm), torch.unbind(valid_tm)):
        new_c, new_h = lstm_cell(TORCH_MATH, gates, c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip)
        c, h = torch.where(valid, new_c, c), torch.where(valid, new_h, h)
        outputs.append(torch.where(valid, new_h, 0.0))
    return torch.stack(outputs), c, h
