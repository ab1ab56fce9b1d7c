"""bilm's LSTM recurrence on PyTorch's CPU path: the loop and products of TensorFlow's `BilmLstmRecurrence` op
(`bilm/ops/native/lowbit_kernels.h`), built without TensorFlow as the portable library
(`portable_recurrence.cc`, once per machine, cached as `bilm.ops.native.build` caches TensorFlow's) and called
through `ctypes` on the tensors' memory, on PyTorch's own OpenMP threads. A whole recurrence is one call: no
per-step dispatch of a dozen small ops, and the recurrent products stream the kernel once a step for every row.
"""
import ctypes
import threading
import warnings

import torch

from bilm.ops.native.build import BUILD_FLAGS, BuildError, compile_cached, source_path

SOURCE = "portable_recurrence.cc"
# OpenMP, whose runtime PyTorch has loaded by then: the library's threads are PyTorch's.
FLAGS = (*BUILD_FLAGS, "-fopenmp", "-fvisibility=hidden")

_LOADED = {}
_LOADING = threading.Lock()


def load_recurrence():
    """The loaded library's `bilm_lstm_recurrence`, built once per machine and loaded once per process; None
    where it cannot be built or loaded (no compiler, a failed build): a RuntimeWarning then says once what
    failed, and PyTorch's steps run as its own ops instead."""
    with _LOADING:
        if "function" not in _LOADED:
            _LOADED["function"] = _load()
        return _LOADED["function"]


def _load():
    try:
        library = ctypes.CDLL(compile_cached(source_path(SOURCE), list(FLAGS), [], identity="OpenMP"))
    except (BuildError, OSError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        warnings.warn(f"bilm could not build its native LSTM recurrence ({message}); PyTorch's own ops run the "
                      "steps instead, more slowly.", RuntimeWarning, stacklevel=4)
        return None
    function = library.bilm_lstm_recurrence
    pointer, int64, single = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    function.argtypes = [pointer, pointer, pointer, int64, int64, int64, pointer, pointer, single, single,
                         pointer, pointer, pointer]
    function.restype = ctypes.c_int
    return function


def applies(gates_tm, recurrent_kernel, projection_kernel):
    """Whether `lstm_steps` runs here: no gradient recorded, float32 tensors on a CPU, and the library loaded."""
    kernels = [kernel for kernel in (recurrent_kernel, projection_kernel) if kernel is not None]
    return (not torch.is_grad_enabled() and gates_tm.device.type == "cpu"
            and all(value.dtype == torch.float32 and value.device.type == "cpu" for value in (gates_tm, *kernels))
            and load_recurrence() is not None)


def lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
               proj_clip):
    """`bilm.ops.lstm_scan.lstm_steps` (its arguments and results) by the library, where `applies`: the rows
    sorted longest first and packed, as TensorFlow's op takes them, each step computing only the rows inside
    their length. Each row's values are the same bytes at any number of rows beside it; against PyTorch's own
    steps, the same to float32 round-off. `valid_tm` must be each row's first steps (`lstm_scan`'s masks).

    Returns:
        `(outputs_tm, final_c, final_h)`, as `lstm_steps`; None where `valid_tm` is not a prefix of each row's
        steps (the caller then runs its own steps).
    """
    time, batch = gates_tm.shape[0], gates_tm.shape[1]
    valid = valid_tm.reshape(time, batch)
    lengths = valid.sum(dim=0)
    steps = torch.arange(time)
    if not torch.equal(valid, steps[:, None] < lengths[None, :]):
        return None
    order = torch.argsort(lengths, descending=True, stable=True)
    active = (lengths[order][None, :] > steps[:, None]).sum(dim=1).to(torch.int32)  # (time,), non-increasing
    in_step = torch.arange(batch)[None, :] < active[:, None]  # (time, batch) over the sorted rows
    gate_index = (steps[:, None] * batch + order[None, :])[in_step].to(torch.int32)  # packed entry -> gates row
    units, output_dim = initial_c.shape[1], initial_h.shape[1]
    gates = gates_tm.contiguous()
    kernels = [None if kernel is None else kernel.contiguous() for kernel in (recurrent_kernel, projection_kernel)]
    c = initial_c[order].to(torch.float32).contiguous()
    h = initial_h[order].to(torch.float32).contiguous()
    packed = torch.empty((gate_index.shape[0], output_dim), dtype=torch.float32)
    failed = load_recurrence()(
        gates.data_ptr(), gate_index.data_ptr(), active.data_ptr(), time, units, output_dim, kernels[0].data_ptr(),
        None if kernels[1] is None else kernels[1].data_ptr(), -1.0 if cell_clip is None else cell_clip,
        -1.0 if proj_clip is None else proj_clip, packed.data_ptr(), c.data_ptr(), h.data_ptr())
    if failed:
        raise MemoryError("bilm's LSTM recurrence found no memory for its scratch arrays")
    outputs = torch.zeros((time * batch, output_dim), dtype=torch.float32)
    outputs[gate_index.to(torch.int64)] = packed
    final_c, final_h = torch.empty_like(c), torch.empty_like(h)
    final_c[order], final_h[order] = c, h
    return outputs.reshape(time, batch, output_dim), final_c, final_h
