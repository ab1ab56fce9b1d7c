"""The LSTM's steps at inference under JAX on a CPU by bilm's native recurrence, an XLA custom call
(`bilm.ops.native.xla_kernels`): the loop TensorFlow's `BilmLstmRecurrence` op runs, on XLA's buffers and threads.

The rows are sorted longest first and packed, as the op takes them, inside the compiled program: each step
computes only the rows inside their length, streams each kernel once for all of them, and runs the cell's
elementwise work in one pass. A layer's steps (`lstm_scan_native`) run a chunk of steps a call, each chunk's input
half made for the rows still inside their length: one chunk's gates are held at a time, and few input halves of
positions past a row's end are made. Each row's values are the same bytes at any number of rows beside it (the op's
contract) and, against the portable steps, the same to float32 round-off. No gradient: training takes the portable
steps. Figures: docs/performance.md.
"""
import jax
import jax.numpy as jnp
import numpy as np
from keras import ops

from bilm.ops.lstm_scan import input_product, reading_order, take_rows, widened
from bilm.ops.native import xla_kernels

# The kernels' dtypes the custom call takes.
NATIVE_KERNEL_DTYPES = ("float32", "bfloat16")
# The most bytes of gates (the input half of a layer's steps) a call is given at once: steps whose gates would take
# more are fed to the recurrence a chunk of steps at a time, each chunk's input half made just before its call.
GATES_AT_ONCE_BYTES = 64 << 20
# A layer that reads distinct rows (`token_index`) has their gates made at once up to this many bytes: each row's
# gates then serve all its positions (a product a distinct token, not one a position), as on TensorFlow.
DISTINCT_GATES_BYTES = 1 << 30
# The distinct tokens' gates are made this many rows at a time (`used_rows_product`), pieces no step reads skipped.
PRODUCT_PIECE_ROWS = 512
# The most steps a chunk runs: the rows a chunk runs are those inside their length at its first step.
CHUNK_STEPS = 8
# The fewest rows a call's steps run natively at inference: below it (one sentence a call) JAX's own steps run
# faster (docs/performance.md).
NATIVE_MIN_ROWS = 4


def native_steps_pay(batch):
    """Whether steps of `batch` rows run faster natively than by JAX's own steps at inference on a CPU."""
    return batch >= NATIVE_MIN_ROWS


def native_steps_available(recurrent_kernel, projection_kernel):
    """Whether the native steps take these kernels (float32 or bfloat16, both one dtype) and the custom call is
    registered (built on the first call; False where it cannot be: `xla_kernels.register`)."""
    dtypes = {str(kernel.dtype) for kernel in (recurrent_kernel, projection_kernel) if kernel is not None}
    return len(dtypes) == 1 and dtypes <= set(NATIVE_KERNEL_DTYPES) and xla_kernels.register()


def lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip, proj_clip,
               gate_index=None, bias=None):
    """`bilm.ops.lstm_scan.lstm_steps` (its arguments and results) by the custom call, for kernels
    `native_steps_available` takes and `valid_tm` that is each row's first steps (as `lstm_scan` gives it); no gradient.

    Raises:
        RuntimeError: the custom call cannot be built here (`native_steps_available` says so first).
    """
    time, batch = valid_tm.shape[:2]
    lengths = jnp.sum(valid_tm[..., 0].astype(jnp.int32), axis=0)
    order = jnp.argsort(-lengths, stable=True).astype(jnp.int32)
    active = jnp.sum(lengths[order][None, :] > jnp.arange(time)[:, None], axis=1).astype(jnp.int32)
    entries = packed_entries(active, batch)
    index = (entries // batch) * batch + order[entries % batch]
    outputs, c, h = _recurrence(gates_tm, index, gate_index, bias, active, ops.cast(initial_c, "float32")[order],
                                ops.cast(initial_h, "float32")[order], recurrent_kernel, projection_kernel, cell_clip,
                                proj_clip)
    inverse = jnp.argsort(order)
    return outputs, c[inverse], h[inverse]


def packed_entries(active, batch):
    """int32 `(time * batch,)`: packed entry k is step t's row b (as `t * batch + b`) for the steps in order and their
    first `active[t]` rows `b` (`active` int32 `(time,)`, each at most `batch`); entries past the last are 0 (never
    read)."""
    inside = jnp.arange(batch)[None, :] < active[:, None]
    return jnp.nonzero(inside.reshape(-1), size=inside.size, fill_value=0)[0].astype(jnp.int32)


def _recurrence(gates, index, gate_index, bias, active, initial_c, initial_h, recurrent_kernel, projection_kernel,
                cell_clip, proj_clip):
    """The custom call over rows sorted longest first: `(outputs (time, batch, output_dim), c, h)` for `active` int32
    `(time,)` (the rows inside their length at each step), `index` int32 `(time * batch,)` (packed entry k's place in
    the outputs, `t * batch + b`), `gates` `(..., 4 * units)` (each place's gates there, or with `gate_index` `(time,
    batch)` the row it picks) and `initial_c`, `initial_h` float32 `(batch, units)`, `(batch, output_dim)`."""
    if not xla_kernels.register():
        raise RuntimeError("bilm's LSTM recurrence for JAX could not be built here (see its RuntimeWarning)")
    (batch, units), output_dim, time = initial_c.shape, initial_h.shape[1], active.shape[0]
    if gate_index is None:
        gates, rows = jnp.reshape(gates, (-1, 4 * units)), index
    else:
        rows = jnp.reshape(gate_index, (-1,))[index].astype(jnp.int32)
    recurrent_kernel = jnp.asarray(recurrent_kernel)
    none = jnp.zeros((0,), recurrent_kernel.dtype)
    call = jax.ffi.ffi_call(xla_kernels.TARGET, (
        jax.ShapeDtypeStruct((time, batch, output_dim), jnp.float32),
        jax.ShapeDtypeStruct((batch, units), jnp.float32), jax.ShapeDtypeStruct((batch, output_dim), jnp.float32)))
    return call(
        ops.cast(gates, "float32"), rows, jnp.zeros((0,), jnp.float32) if bias is None else ops.cast(bias, "float32"),
        index, active, recurrent_kernel, none if projection_kernel is None else jnp.asarray(projection_kernel),
        initial_c, initial_h, cell_clip=np.float32(-1.0 if cell_clip is None else cell_clip),
        proj_clip=np.float32(-1.0 if proj_clip is None else proj_clip))


def lstm_scan_native(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias,
                     projection_kernel=None, cell_clip=None, proj_clip=None, go_backwards=False, token_index=None,
                     input_matmul_dtype="float32", recurrence=None):
    """`lstm_scan` (its arguments and results) with the native steps as its recurrence.

    A layer that reads distinct rows (`token_index`) makes their gates once, where they take at most
    `DISTINCT_GATES_BYTES` (`_distinct_row_steps`). Otherwise the steps run a chunk at a time, each chunk's input
    half made for the rows still inside their length (`_chunked_steps`). Each step's arithmetic is the same either
    way."""
    del recurrence  # the native steps
    input_kernel, bias, lengths = widened(input_kernel), widened(bias), ops.cast(lengths, "int32")
    _, order, read = reading_order(inputs, lengths, go_backwards, token_index)
    state = (ops.cast(initial_c, "float32"), ops.cast(initial_h, "float32"))
    kernels_and_clips = (recurrent_kernel, projection_kernel, cell_clip, proj_clip)
    distinct = None if token_index is None else ops.convert_to_tensor(inputs)[0]
    if distinct is not None and distinct.shape[0] * input_kernel.shape[-1] * 4 <= DISTINCT_GATES_BYTES:
        outputs_tm, final_c, final_h = _distinct_row_steps(distinct, read, lengths, state, input_kernel, bias,
                                                           kernels_and_clips, input_matmul_dtype)
    else:
        outputs_tm, final_c, final_h = _chunked_steps(read, distinct, lengths, state, input_kernel, bias,
                                                      kernels_and_clips, input_matmul_dtype)
    outputs = jnp.transpose(outputs_tm, (1, 0, 2))
    if order is not None:
        outputs = take_rows(outputs, order)
    return outputs, final_c, final_h


def _distinct_row_steps(distinct, read, lengths, state, input_kernel, bias, kernels_and_clips, matmul_dtype):
    """The steps over the gates of `distinct` `(n, input_dim)` made once (`used_rows_product`: only for the rows
    `read` `(time, batch)`, the rows each step reads, can pick), read in place: `(outputs_tm, final_c, final_h)`."""
    gates = used_rows_product(distinct, input_kernel, matmul_dtype, jnp.max(read, initial=0) + 1)
    valid_tm = (jnp.arange(read.shape[0])[:, None] < lengths[None, :])[..., None]
    return lstm_steps(gates, valid_tm, *state, *kernels_and_clips, gate_index=read, bias=bias)


def used_rows_product(rows, kernel, matmul_dtype, used):
    """`input_product(rows, kernel, matmul_dtype)` `(n, width)` of `rows` `(n, input_dim)` for the first `used` rows
    (a traced int): made `PRODUCT_PIECE_ROWS` rows at a time, the pieces past `used` not made (zeros). The distinct
    rows a call is given are padded to one of a few counts (`bilm.models.portable_calls.distinct_rows`), up to twice
    the rows it has, or to all of a call's positions where they are few."""
    n, width = rows.shape[0], kernel.shape[-1]
    piece = min(PRODUCT_PIECE_ROWS, n)
    padded = jnp.pad(rows, ((0, -n % piece), (0, 0)))

    def made(piece_start, piece_rows):
        return jax.lax.cond(piece_start < used, lambda x: input_product(x, kernel, matmul_dtype),
                            lambda x: jnp.zeros((piece, width), jnp.float32), piece_rows)

    products = jax.lax.map(lambda args: made(*args), (jnp.arange(0, padded.shape[0], piece),
                                                      jnp.reshape(padded, (-1, piece, rows.shape[1]))))
    return jnp.reshape(products, (-1, width))[:n]


def _chunked_steps(read, distinct, lengths, state, input_kernel, bias, kernels_and_clips, matmul_dtype):
    """The steps over rows sorted longest first, a chunk of steps at a time (`chunk_steps`: at most `CHUNK_STEPS`,
    and gates of at most `GATES_AT_ONCE_BYTES`), each chunk's input half made just before its call for only the
    rows still inside their length at its first step (rounded up to one of `row_counts`): one chunk's gates are
    held at a time, no input half of a position is made in a chunk after its row's end, and chunks past the longest
    row do nothing. `read` `(time, batch, input_dim)`, or with `distinct` `(n, input_dim)` the rows it picks `(time,
    batch)`: `(outputs_tm, final_c, final_h)`."""
    time, batch = read.shape[:2]
    output_dim = state[1].shape[1]
    rows = jnp.argsort(-lengths, stable=True)  # longest first: the rows inside their length are the first ones
    inverse = jnp.argsort(rows)
    sorted_lengths = lengths[rows]
    chunk = chunk_steps(time, batch * input_kernel.shape[-1] * 4)
    counts = row_counts(batch)

    def chunk_of(n):  # a chunk's steps for its first `n` rows, the others ended before it
        def run(state, x, active, entries):
            if n == 0:
                return state, jnp.zeros((chunk, batch, output_dim), jnp.float32)
            x, entries = x[:, :n], entries[:chunk * n]
            gates = input_product(x if distinct is None else jnp.take(distinct, x, axis=0), input_kernel,
                                  matmul_dtype)
            outputs, c, h = _recurrence(gates, (entries // batch) * n + entries % batch, None, bias, active,
                                        state[0][:n], state[1][:n], *kernels_and_clips)
            return (state[0].at[:n].set(c), state[1].at[:n].set(h)), jnp.pad(outputs, ((0, 0), (0, batch - n), (0, 0)))
        return run

    chunks = [chunk_of(n) for n in counts]

    def chunk_call(state, chunk_inputs):
        start, x = chunk_inputs
        active = jnp.sum(sorted_lengths[None, :] > start + jnp.arange(chunk)[:, None], axis=1).astype(jnp.int32)
        return jax.lax.switch(jnp.sum(jnp.asarray(counts) >= active[0]) - 1, chunks, state, x, active,
                              packed_entries(active, batch))

    (final_c, final_h), outputs_tm = jax.lax.scan(chunk_call, (state[0][rows], state[1][rows]), (
        jnp.arange(0, time, chunk), jnp.reshape(read[:, rows], (time // chunk, chunk, batch, *read.shape[2:]))))
    return jnp.reshape(outputs_tm, (time, batch, output_dim))[:, inverse], final_c[inverse], final_h[inverse]


def chunk_steps(time, step_bytes):
    """The steps of a chunk of `time` steps whose gates take `step_bytes` a step: the most that divides `time`, is at
    most `CHUNK_STEPS` and whose gates take at most `GATES_AT_ONCE_BYTES` (at least 1)."""
    most = min(CHUNK_STEPS, max(1, GATES_AT_ONCE_BYTES // step_bytes), time)
    return max(n for n in range(1, most + 1) if time % n == 0)


def row_counts(batch):
    """The numbers of rows a chunk of a batch of `batch` rows runs, descending: `batch`, then halves (rounded up), the
    last `NATIVE_MIN_ROWS`, then 0 (a chunk past every row's end)."""
    counts = [batch]
    while counts[-1] > NATIVE_MIN_ROWS:
        counts.append(max(NATIVE_MIN_ROWS, (counts[-1] + 1) // 2))
    return counts + [0]
