"""bilm's CPU kernels for the backends other than TensorFlow, on NumPy arrays: the LSTM recurrence of TensorFlow's
`BilmLstmRecurrence` op, the product of its `BilmLowbitMatmul` (`lowbit_kernels.h`), the char CNN's table lookups
(`char_max_pooled`, the sums of TensorFlow's table loop) and the words of TensorFlow's random numbers
(`philox_words`), built without TensorFlow as `portable_kernels.cc` (once per machine, cached as TensorFlow's op
library is: `bilm.ops.native.build`) and called through `ctypes` on the arrays' memory. A whole recurrence is one
call: no per-step dispatch of a dozen small ops, and each step's products stream the kernels once for all its rows.
PyTorch passes its CPU tensors' memory (`Tensor.numpy()` shares it), Keras's NumPy backend its arrays. (JAX does
not: through a host callback, which copies its arguments and runs on any of XLA's threads, each taking a team of
OpenMP threads of its own, one sentence's recurrence took 2.6 times as long as its own steps; docs/performance.md.
JAX calls the same recurrence as an XLA custom call instead: `bilm.ops.native.xla_kernels`.)
"""
import collections
import ctypes
import threading

import numpy as np

from bilm.ops.native.build import BUILD_FLAGS, BuildError, compile_cached, source_path, warn_not_built

SOURCE = "portable_kernels.cc"
# OpenMP: PyTorch's own runtime where PyTorch has loaded it (on import), so that the threads are its threads.
FLAGS = (*BUILD_FLAGS, "-fopenmp", "-fvisibility=hidden")

_LOADED = {}
_LOADING = threading.Lock()


def load_library():
    """The library (`ctypes.CDLL`, its functions' arguments declared), built once per machine and loaded once per
    process; None where it cannot be built or loaded (no compiler, a failed build): a RuntimeWarning then says
    once what failed, and the backend's own ops run instead."""
    with _LOADING:
        if "library" not in _LOADED:
            _LOADED["library"] = _load()
        return _LOADED["library"]


def _load():
    try:
        library = ctypes.CDLL(compile_cached(source_path(SOURCE), list(FLAGS), [], identity="OpenMP"))
    except (BuildError, OSError) as error:
        warn_not_built("native CPU kernels", "the backend's own ops run instead, more slowly", error, stacklevel=5)
        return None
    pointer, int64, single = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    for suffix in ("", "_bfloat16"):
        recurrence, product = (getattr(library, name + suffix) for name in ("bilm_lstm_recurrence", "bilm_matmul"))
        recurrence.argtypes = [pointer, pointer, pointer, pointer, pointer, int64, int64, int64, int64, pointer,
                               pointer, single, single, pointer, pointer, pointer]
        product.argtypes = [pointer, int64, int64, pointer, int64, pointer]
        recurrence.restype = product.restype = ctypes.c_int
    library.bilm_char_max_pooled.argtypes = [pointer, int64, int64, pointer, pointer, pointer, int64, int64, pointer]
    library.bilm_char_max_pooled.restype = None
    library.bilm_philox.argtypes = [pointer, pointer, pointer, pointer, int64, int64, pointer]
    library.bilm_philox.restype = None
    return library


# The kernels' dtypes the library takes, and the suffix of its functions for each: float32, and bfloat16 as its
# bits in uint16 (NumPy has no bfloat16; PyTorch's bfloat16 tensor viewed as 16-bit integers).
KERNEL_SUFFIXES = {np.dtype(np.float32): "", np.dtype(np.uint16): "_bfloat16"}


def _as_bits(kernel):
    """`kernel` with a bfloat16 dtype (`ml_dtypes.bfloat16`, Keras's NumPy backend's) viewed as its bits, uint16;
    any other as it is."""
    return kernel.view(np.uint16) if kernel.dtype.name == "bfloat16" else kernel


def _kernel_array(kernel):
    """`kernel` as the library reads it: contiguous, in a dtype of `KERNEL_SUFFIXES` (bfloat16 as its bits; any
    other dtype as float32)."""
    kernel = _as_bits(np.asarray(kernel))
    return np.ascontiguousarray(kernel, kernel.dtype if kernel.dtype in KERNEL_SUFFIXES else np.float32)


def _function(name, kernel):
    """The library's function `name` for `kernel`'s dtype (`KERNEL_SUFFIXES`)."""
    return getattr(load_library(), name + KERNEL_SUFFIXES[kernel.dtype])


def matmul(x, kernel):
    """`x @ kernel` by the library (`load_library()` not None) for float32 `x` `(rows, n)` and `kernel` `(n, m)`,
    float32 or bfloat16 (`_kernel_array`: another dtype is taken as float32): float32
    `(rows, m)`, each row's sums the same bytes at any number of rows; the kernel streamed once for each group of
    8 rows (a few rows' product is bound by reading the kernel). A bfloat16 kernel's product is TensorFlow's
    `BilmLowbitMatmul`'s: on a CPU with bfloat16 dot products, `x` rounded to bfloat16."""
    if x.ndim != 2 or kernel.ndim != 2 or x.shape[1] != kernel.shape[0]:
        raise ValueError(f"bilm's native matmul: x {tuple(x.shape)} and kernel {tuple(kernel.shape)} are not "
                         "(rows, n) and (n, m)")
    x, kernel = np.ascontiguousarray(x, np.float32), _kernel_array(kernel)
    out = np.empty((x.shape[0], kernel.shape[1]), np.float32)
    if _function("bilm_matmul", kernel)(x.ctypes.data, x.shape[0], x.shape[1], kernel.ctypes.data, kernel.shape[1],
                                        out.ctypes.data):
        raise MemoryError("bilm's native matmul found no memory for its scratch arrays")
    return out


class CharTables(collections.namedtuple("CharTables", ["values", "widths", "nums", "rows"])):
    """The char CNN's lookup tables (`char_tables`): `values` float32, each filter's `(rows, width, num)` one after
    another (row c, offset k: the char embedding's row c times the kernel's offset k); `widths`, `nums` int64
    `(n_filters,)`; `rows` the char embedding's."""


def char_tables(char_embedding, kernels):
    """`CharTables` of a char embedding float32 `(n_characters, dim)` and a list of float32 kernels
    `(width, dim, num)` (NumPy arrays), for `char_max_pooled`: a product a kernel, of a fixed shape, so the same
    bytes for the same weights.

    Raises:
        ValueError: a kernel that is not `(width, dim, num)` for the embedding's `dim`.
    """
    embedding = np.asarray(char_embedding, np.float32)
    kernels = [np.asarray(kernel, np.float32) for kernel in kernels]
    for kernel in kernels:
        if kernel.ndim != 3 or kernel.shape[1] != embedding.shape[1]:
            raise ValueError(f"bilm's native char convolutions: a kernel of shape {kernel.shape} for a char "
                             f"embedding of shape {embedding.shape}")
    values = np.concatenate([(embedding @ np.transpose(kernel, (1, 0, 2)).reshape(kernel.shape[1], -1)).reshape(-1)
                             for kernel in kernels]).astype(np.float32, copy=False)
    return CharTables(values, np.asarray([kernel.shape[0] for kernel in kernels], np.int64),
                      np.asarray([kernel.shape[2] for kernel in kernels], np.int64), len(embedding))


def char_max_pooled(char_ids, tables):
    """`bilm.ops.char_convolutions_portable.portable_char_convolutions` by the library (`load_library()` not None)
    from the `CharTables` of its char embedding and kernels: each window a sum of table rows in the order of its
    offsets, as TensorFlow's table loop computes it, so no multiply-adds per window; the max over the windows.
    Float32 `(n_tokens, sum of nums)` for int `char_ids` `(n_tokens, columns)`; a token's values the same bytes
    at any number of tokens beside it; against the portable convolutions, the same to float32 round-off.

    Raises:
        ValueError: an id outside the embedding's rows, or a filter wider than the columns.
    """
    ids = np.ascontiguousarray(char_ids, np.int32)
    n_tokens, columns = ids.shape
    if ids.size and (ids.min() < 0 or ids.max() >= tables.rows):
        raise ValueError(f"bilm's native char convolutions: char ids from {ids.min()} to {ids.max()}, and the char "
                         f"embedding has {tables.rows} rows")
    if len(tables.widths) and tables.widths.max() > columns:
        raise ValueError(f"bilm's native char convolutions: a filter of width {tables.widths.max()} over "
                         f"{columns} columns of char ids")
    out = np.empty((n_tokens, int(tables.nums.sum())), np.float32)
    load_library().bilm_char_max_pooled(ids.ctypes.data, n_tokens, columns, tables.values.ctypes.data,
                                        tables.widths.ctypes.data, tables.nums.ctypes.data, len(tables.widths),
                                        tables.rows, out.ctypes.data)
    return out


def philox_words(key, counter, n_words, multipliers, increments, rounds):
    """The first `n_words` 32-bit words (int64 NumPy `(n_words,)`) of the Philox-4x32 stream from `key` `(2,)`
    and the 128-bit `counter` `(4,)` (32-bit words, low first; any integer arrays), block i from the counter plus
    i, with the rounds' `multipliers` `(2,)`, the key's `increments` `(2,)` and `rounds` (TensorFlow's stream:
    `bilm.backend.philox`), by the library (`load_library()` not None): as `bilm.backend.torch.random.philox_words`
    computes them with tensors, without an op per round."""
    words = [np.ascontiguousarray(np.asarray(x, np.int64) & 0xFFFFFFFF, np.uint32)
             for x in (key, counter, multipliers, increments)]
    out = np.empty(n_words, np.int64)
    load_library().bilm_philox(*(x.ctypes.data for x in words), rounds, n_words, out.ctypes.data)
    return out


def steps_or_none(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                  proj_clip, gate_index=None, bias=None):
    """`lstm_steps` for `bilm.ops.lstm_scan.lstm_steps`' arguments as NumPy arrays, where the gates and states are
    float32, the kernels float32 or both bfloat16 (as bits, `KERNEL_SUFFIXES`, or `ml_dtypes.bfloat16`),
    `valid_tm` marks each row's first steps (as `lstm_scan` masks them) and the library is built; else None (the
    caller runs its own steps)."""
    gates_tm, initial_c, initial_h, bias = (None if x is None else np.asarray(x)
                                            for x in (gates_tm, initial_c, initial_h, bias))
    recurrent_kernel, projection_kernel = (None if x is None else _as_bits(np.asarray(x))
                                           for x in (recurrent_kernel, projection_kernel))
    kernels = {x.dtype for x in (recurrent_kernel, projection_kernel) if x is not None}
    if (any(x is not None and x.dtype != np.float32 for x in (gates_tm, initial_c, initial_h, bias))
            or len(kernels) != 1
            or not kernels <= set(KERNEL_SUFFIXES) or load_library() is None):
        return None
    valid = np.asarray(valid_tm).reshape(len(valid_tm), -1)
    lengths = valid.sum(axis=0)
    if not np.array_equal(valid, np.arange(len(valid))[:, None] < lengths[None, :]):
        return None
    return lstm_steps(gates_tm, lengths, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip,
                      proj_clip, gate_index=gate_index, bias=bias)


def lstm_steps(gates_tm, lengths, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip, proj_clip,
               gate_index=None, bias=None):
    """`bilm.ops.lstm_scan.lstm_steps`' results, on NumPy arrays, by the library (`load_library()` not None):
    the rows sorted longest first and packed, as TensorFlow's op takes them, each step computing only the rows
    inside their length. Each row's values are the same bytes at any number of rows beside it; against the
    portable steps, the same to float32 round-off.

    Args:
        gates_tm: float32 `(time, batch, 4 * units)`; or with `gate_index` (int `(time, batch)`), the rows
            `(n, 4 * units)` it picks from: step t of row b reads `gates_tm[gate_index[t, b]]` (an index past
            a row's length is not read).
        lengths: int `(batch,)`, each row's steps.
        bias: float32 `(4 * units,)` or None, added to each row read, before the recurrent half (the same
            bytes as gates given with it).
        the states, kernels and clips (None for none): as `bilm.ops.lstm_scan.lstm_steps`', the kernels both
            float32 or both bfloat16 (`_kernel_array`: then the products of TensorFlow's op on bfloat16
            kernels; any other dtype is taken as float32).

    Returns:
        `(outputs_tm, final_c, final_h)`: float32 `(time, batch, output_dim)` (zeros past each row's length),
        `(batch, units)`, `(batch, output_dim)`.

    Raises:
        ValueError: an array of another shape than these, kernels of two dtypes, or an index of `gate_index`
            outside the gates' rows.
    """
    time, batch = gates_tm.shape[:2] if gate_index is None else np.shape(gate_index)
    units, output_dim = initial_c.shape[1], initial_h.shape[1]
    expected = {"gates_tm": (gates_tm.shape, (time, batch, 4 * units) if gate_index is None
                             else (len(gates_tm), 4 * units)),
                "lengths": (np.shape(lengths), (batch,)), "initial_c": (initial_c.shape, (batch, units)),
                "initial_h": (initial_h.shape, (batch, output_dim)),
                "recurrent_kernel": (recurrent_kernel.shape, (output_dim, 4 * units))}
    if bias is not None:
        expected["bias"] = (bias.shape, (4 * units,))
    if projection_kernel is not None:
        expected["projection_kernel"] = (projection_kernel.shape, (units, output_dim))
    elif output_dim != units:
        raise ValueError(f"bilm's native LSTM recurrence: without a projection_kernel, initial_h must have "
                         f"initial_c's {units} columns; it has shape {tuple(initial_h.shape)}")
    for name, (shape, wanted) in expected.items():
        if tuple(shape) != wanted:  # the library reads the arrays as these shapes: refuse before it does
            raise ValueError(f"bilm's native LSTM recurrence: {name} has shape {tuple(shape)}, expected {wanted} "
                             f"from initial_c {tuple(initial_c.shape)} and initial_h {tuple(initial_h.shape)}")
    lengths = np.asarray(lengths)
    order = np.argsort(-lengths, kind="stable")
    steps = np.arange(time)
    active = (lengths[order][None, :] > steps[:, None]).sum(axis=1).astype(np.int32)  # non-increasing
    index = (steps[:, None] * batch + order[None, :])[np.arange(batch)[None, :] < active[:, None]].astype(np.int32)
    if gate_index is None:
        rows = index
    else:
        rows = np.asarray(gate_index).reshape(-1)[index].astype(np.int32)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(gates_tm)):
            raise ValueError(f"bilm's native LSTM recurrence: gate_index reads rows {rows.min()} to {rows.max()} "
                             f"of gates_tm's {len(gates_tm)}")
    gates = np.ascontiguousarray(gates_tm, np.float32)
    kernels = [None if kernel is None else _kernel_array(kernel) for kernel in (recurrent_kernel, projection_kernel)]
    if kernels[1] is not None and kernels[1].dtype != kernels[0].dtype:
        raise ValueError(f"bilm's native LSTM recurrence: the kernels are {kernels[0].dtype} (recurrent) and "
                         f"{kernels[1].dtype} (projection); give both one dtype")
    c = np.ascontiguousarray(np.asarray(initial_c, np.float32)[order])
    h = np.ascontiguousarray(np.asarray(initial_h, np.float32)[order])
    bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
    outputs = np.empty((time, batch, output_dim), np.float32)
    failed = _function("bilm_lstm_recurrence", kernels[0])(
        gates.ctypes.data, rows.ctypes.data, None if bias is None else bias.ctypes.data, index.ctypes.data,
        active.ctypes.data, time, batch, units, output_dim,
        kernels[0].ctypes.data, None if kernels[1] is None else kernels[1].ctypes.data,
        -1.0 if cell_clip is None else cell_clip, -1.0 if proj_clip is None else proj_clip, outputs.ctypes.data,
        c.ctypes.data, h.ctypes.data)
    if failed:
        raise MemoryError("bilm's native LSTM recurrence found no memory for its scratch arrays")
    final_c, final_h = np.empty_like(c), np.empty_like(h)
    final_c[order], final_h[order] = c, h
    return outputs, final_c, final_h
