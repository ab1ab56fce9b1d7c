"""The LSTM recurrence for inference: the step-by-step half of the layer, given the input half.

`lstm_recurrence_packed` runs a `tf.while_loop` in the graph over a packed
batch: rows longest first, each step computing only the rows still inside
their length, so padding costs no matmul rows (PyTorch's packed sequences).
`lstm_recurrence_xla` runs a padded, masked loop compiled with XLA (static
shapes), with a gradient that runs the hand-written backward pass of
`bilm.ops.lstm_bptt` (fine-tuning through ELMo). Training uses
`bilm.ops.lstm_bptt`'s own forward loop, which also stores what its
backward pass needs.
"""
from typing import NamedTuple

import tensorflow as tf

from bilm.ops.lowbit_matmul import (
    UNLIMITED_ROWS,
    load_lowbit_ops,
    native_kernels_allowed,
    streamed_kernel_matmul,
    streamed_rows_limit,
)
from bilm.ops.lstm_bptt import recomputed_gradients
from bilm.ops.lstm_cell import lstm_cell_step, projection_stand_in
from bilm.ops.matmul_dtype import kernel_matmul, stock_form
from bilm.ops.placement import compiling_with_xla
from bilm.ops.scaled_kernel import ScaledKernel


def padded_size(size):
    """The size XLA compiles for: a multiple of 16, or of an eighth of the
    next power of two for large sizes (at most ~12% padding, a handful of
    compilations per doubling). `size`: int32 scalar tensor."""
    power = tf.bitwise.left_shift(1, tf.cast(tf.math.ceil(
        tf.math.log(tf.cast(tf.maximum(size, 1), tf.float32)) / tf.math.log(2.0)), tf.int32))
    step = tf.maximum(16, power // 8)
    return (size + step - 1) // step * step


def lstm_recurrence_xla(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                        cell_clip, proj_clip):
    """The padded LSTM recurrence compiled with XLA, for inference.

    XLA compiles once per input shape, so time is padded up to a bucket
    (`padded_size`: a handful of compilations instead of one per sentence
    length); the loop itself stops at the longest row.

    Args:
        gates_tm: `(time, batch, 4 * units)`, `x W_x + b` in `i, j, f, o`
            order, time-major.
        lengths: `(batch,)` valid steps per row.
        c0, h0: `(batch, units)`, `(batch, output_dim)` initial state.
        recurrent_kernel: `(output_dim, 4 * units)`, float32 or bfloat16.
        projection_kernel: `(units, output_dim)` (same dtype) or None.
        cell_clip, proj_clip: Python floats or None.

    Returns:
        outputs `(batch, time, output_dim)` (zeros at padded steps), and the
        final `c`, `h` at each row's last valid step.
    """
    time = tf.shape(gates_tm)[0]
    # Inside a function compiled with XLA, shapes are known: nothing to round up.
    padded_time = time if compiling_with_xla() else padded_size(time)
    projection_kernel, use_projection = projection_stand_in(projection_kernel, gates_tm.dtype)
    clips = (cell_clip, proj_clip)

    # Autodiff cannot see into an XLA loop, so gradients (e.g. fine-tuning
    # through ELMo) re-run the loop with the hand-written backward pass.
    @tf.custom_gradient
    def recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel):
        padded, c0_, h0_, recurrent, projection = [
            tf.stop_gradient(x) for x in (gates_tm, c0, h0, recurrent_kernel, projection_kernel)]
        padded = tf.pad(padded, [[0, padded_time - time], [0, 0], [0, 0]])
        # An empty batch or sequence has nothing to compile (and XLA's
        # scatter rejects it): zeros out, states unchanged.
        outputs, c, h = tf.cond(
            tf.size(gates_tm) > 0,
            lambda: _compiled_recurrence(padded, lengths, c0_, h0_, recurrent,
                                         projection if use_projection else None, *clips),
            lambda: (tf.zeros([tf.shape(padded)[1], tf.shape(padded)[0], tf.shape(h0_)[1]], padded.dtype),
                     c0_, h0_))

        def grad(d_outputs, d_c, d_h):
            # The backward pass is float32 (bfloat16 inference kernels are widened).
            kernels = [tf.cast(k, tf.float32) for k in (recurrent_kernel, projection_kernel)]
            *grads, d_recurrent, d_projection = recomputed_gradients(
                gates_tm, lengths, c0, h0, *kernels, *clips, use_projection, d_outputs, d_c, d_h)
            return (*grads, tf.cast(d_recurrent, recurrent_kernel.dtype),
                    tf.cast(d_projection, projection_kernel.dtype))

        return (outputs[:, :time], c, h), grad

    return recurrence(gates_tm, c0, h0, recurrent_kernel, projection_kernel)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _compiled_recurrence(gates_tm, lengths, c0, h0, recurrent_kernel, projection_kernel,
                         cell_clip, proj_clip):
    # Outputs live in one zero buffer updated in place (XLA's dynamic
    # update), so steps past the longest row are never run.
    outputs = tf.zeros([tf.shape(gates_tm)[0], tf.shape(h0)[0], tf.shape(h0)[1]], gates_tm.dtype)

    def step(t, c, h, outputs):
        cell = lstm_cell_step(gates_tm[t], c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip)
        valid = tf.expand_dims(t < lengths, 1)
        outputs = tf.tensor_scatter_nd_update(
            outputs, [[t]], tf.where(valid, cell.new_h, tf.zeros_like(cell.new_h))[tf.newaxis])
        return t + 1, tf.where(valid, cell.new_c, c), tf.where(valid, cell.new_h, h), outputs

    _, c, h, outputs = tf.while_loop(
        lambda t, *_: t < tf.reduce_max(lengths), step, (tf.constant(0), c0, h0, outputs),
        maximum_iterations=tf.shape(gates_tm)[0])
    return tf.transpose(outputs, [1, 0, 2]), c, h


class PackedSteps(NamedTuple):
    """How `lstm_recurrence_packed` visits a batch (see `packed_steps`).

    `order` `(batch,)`: the rows, longest first (stable); `active`
    `(n_steps,)`: how many rows step t computes, the first `active[t]` of
    `order`; `offsets` `(n_steps,)`: where step t's rows start in the packed
    layout; `positions` `(n_valid, 2)`: the `(row, time)` each packed entry
    reads and writes, step by step (`n_valid` = sum of lengths).
    """
    order: tf.Tensor
    active: tf.Tensor
    offsets: tf.Tensor
    positions: tf.Tensor


def packed_steps(lengths, go_backwards=False):
    """The packed layout of a batch of rows of `lengths` `(batch,)`.

    Step t of row b reads time t, or with `go_backwards` time
    `lengths[b] - 1 - t` (each row reversed within its length), so a
    backward layer needs no reversed copy of its inputs or outputs.
    """
    lengths = tf.cast(lengths, tf.int32)
    order = tf.argsort(lengths, direction="DESCENDING", stable=True)
    sorted_lengths = tf.gather(lengths, order)
    n_steps = tf.reduce_max(tf.concat([sorted_lengths, [0]], axis=0))
    inside = sorted_lengths[tf.newaxis, :] > tf.range(n_steps)[:, tf.newaxis]  # (n_steps, batch)
    active = tf.reduce_sum(tf.cast(inside, tf.int32), axis=1)
    step_and_rank = tf.cast(tf.where(inside), tf.int32)  # time-major, longest row first
    rows = tf.gather(order, step_and_rank[:, 1])
    times = step_and_rank[:, 0]
    if go_backwards:
        times = tf.gather(lengths, rows) - 1 - times
    return PackedSteps(order, active, tf.math.cumsum(active, exclusive=True), tf.stack([rows, times], axis=1))


def lstm_recurrence_packed(gates, gate_index, steps, time, c0, h0, recurrent_kernel, projection_kernel,
                           cell_clip, proj_clip, native_kernels=None):
    """Runs the LSTM recurrence over a packed batch, in the graph.

    Args:
        gates: the input half of the gates, `x W_x + b` in `i, j, f, o`
            order: `(n_valid, 4 * units)` in packed order, or with
            `gate_index` `(n_rows, 4 * units)` rows to pick from.
        gate_index: None, or int `(n_valid,)`: packed entry k reads
            `gates[gate_index[k]]` (e.g. one row per distinct token).
        steps: `PackedSteps` of the batch (`packed_steps`).
        time: the outputs' time axis, at least the longest length.
        c0, h0: `(batch, units)`, `(batch, output_dim)` initial state.
        recurrent_kernel: `(output_dim, 4 * units)`, float32 or bfloat16,
            or a `bilm.ops.scaled_kernel.ScaledKernel` (int8).
        projection_kernel: `(units, output_dim)` (same kind) or None.
        cell_clip, proj_clip: Python floats or None.
        native_kernels: whether steps of up to
            `bilm.ops.lowbit_matmul.streamed_rows_limit` rows of the
            kernels (every step, for float32 kernels) may run bilm's own
            kernel, where it takes them (`bilm.ops.lowbit_matmul`); None: unless inside
            `bilm.ops.lowbit_matmul.stock_kernels()`. Without it the kernels
            take their `stock_form` once, before the loop, and each step's
            products are `bilm.ops.matmul_dtype.kernel_matmul`'s: for a
            float32 kernel the batch-invariant product, which is still
            bilm's kernel wherever that is allowed and takes float32
            (`bilm.ops.batch_invariant`), so that a row's bytes do not
            depend on the choice.

    Returns:
        outputs `(batch, time, output_dim)` (zeros at padded steps), and the
        final `c`, `h` at each row's last valid step.
    """
    if native_kernels is None:
        native_kernels = native_kernels_allowed()
    # The kernels of a layer share one dtype, so the recurrent one decides.
    limit = streamed_rows_limit(recurrent_kernel) if native_kernels else 0
    kernels = (recurrent_kernel, projection_kernel)
    loop_inputs = (gates, gate_index, steps.active, steps.offsets, tf.gather(c0, steps.order),
                   tf.gather(h0, steps.order))
    clips = (cell_clip, proj_clip)
    if not limit:
        outputs, c, h = _packed_loop(*loop_inputs, _stock_forms(kernels), *clips, "stock")
    elif limit == UNLIMITED_ROWS or (c0.shape[0] is not None and c0.shape[0] <= limit):
        # Rows known at trace time and within the limit: bilm's op alone, without the graph loop as the
        # other branch (tracing that loop costs about as much as the op's own trace).
        outputs, c, h = _native_recurrence(*loop_inputs, kernels, *clips)
    else:
        # Rows only drop out as the loop goes, so the first step has the most.
        most_rows = tf.reduce_max(tf.concat([steps.active, [0]], axis=0))
        outputs, c, h = tf.cond(
            most_rows <= limit,
            lambda: _native_recurrence(*loop_inputs, kernels, *clips),
            lambda: _packed_loop(*loop_inputs, _choices(kernels, limit), *clips, "by_rows"))
    batch = tf.shape(c0)[0]
    outputs = tf.scatter_nd(steps.positions, outputs, [batch, time, tf.shape(h0)[1]])
    unsort = tf.math.invert_permutation(steps.order)
    return outputs, tf.gather(c, unsort), tf.gather(h, unsort)


def _stock_forms(kernels):
    """The kernels as stock products take them, made once a call (`stock_form`)."""
    return tuple(stock_form(k) for k in kernels)


def _choices(kernels, limit):
    """`(kernel, its stock form, limit)` for each kernel that is there (None stays None)."""
    return tuple(None if kernel is None else (kernel, stock_form(kernel), limit) for kernel in kernels)


def _by_rows_matmul(x, choice):
    """`x @ kernel` for a `(kernel, its stock form, limit)` choice: bilm's
    kernel for at most `limit` rows, else a stock product."""
    kernel, stock, limit = choice
    return tf.cond(tf.shape(x)[0] <= limit, lambda: streamed_kernel_matmul(x, kernel),
                   lambda: kernel_matmul(x, stock))


@tf.function(reduce_retracing=True, autograph=False)
def _native_recurrence(gates, gate_index, active, offsets, c0, h0, kernels, cell_clip, proj_clip):
    """`_packed_loop(..., "streamed")` as one op of bilm's (`BilmLstmRecurrence`):
    every step in C++, so a step costs its two products and its cell's
    arithmetic, with none of a graph loop's per-op work (docs/performance.md).
    Its gradient re-runs the graph loop under a tape (a trainable layer
    below, or float32 kernels being fine-tuned)."""
    # Only float32 kernels can carry a gradient: they become inputs of the custom gradient.
    float_positions = [i for i, k in enumerate(kernels)
                       if k is not None and not isinstance(k, ScaledKernel) and k.dtype == tf.float32]

    @tf.custom_gradient
    def recurrence(gates, c0, h0, *float_kernels):
        given = list(kernels)
        for i, kernel in zip(float_positions, float_kernels):
            given[i] = kernel
        recurrent, recurrent_scale = _values_and_scale(given[0])
        projection, projection_scale = _values_and_scale(given[1], recurrent.dtype)
        outputs = load_lowbit_ops().bilm_lstm_recurrence(
            gates, tf.zeros([0], tf.int32) if gate_index is None else gate_index, active, c0, h0,
            recurrent, recurrent_scale, projection, projection_scale,
            cell_clip=-1.0 if cell_clip is None else float(cell_clip),
            proj_clip=-1.0 if proj_clip is None else float(proj_clip))

        def grad(d_outputs, d_c, d_h):
            sources = [gates, c0, h0, *float_kernels]
            with tf.GradientTape() as tape:
                tape.watch(sources)
                again = _packed_loop(gates, gate_index, active, offsets, c0, h0, tuple(given), cell_clip, proj_clip,
                                     "streamed")
            return tape.gradient(again, sources, output_gradients=[d_outputs, d_c, d_h])

        return tuple(outputs), grad

    return recurrence(gates, c0, h0, *(tf.convert_to_tensor(kernels[i]) for i in float_positions))


def _values_and_scale(kernel, dtype=None):
    """`(values, scale)` as `BilmLstmRecurrence` takes a kernel: a `ScaledKernel`'s
    two; a tensor and no scale `(0,)`; None (no projection) an empty `(0, 0)` of `dtype`."""
    if kernel is None:
        return tf.zeros([0, 0], dtype), tf.zeros([0])
    if isinstance(kernel, ScaledKernel):
        return tf.convert_to_tensor(kernel.values), tf.convert_to_tensor(kernel.scale)
    return tf.convert_to_tensor(kernel), tf.zeros([0])


_STEP_MATMULS = {"stock": kernel_matmul, "streamed": streamed_kernel_matmul, "by_rows": _by_rows_matmul}


@tf.function(reduce_retracing=True, autograph=False)
def _packed_loop(gates, gate_index, active, offsets, c0, h0, kernels, cell_clip, proj_clip, step_matmul):
    """The loop of `lstm_recurrence_packed` on rows sorted longest first;
    returns the packed outputs `(n_valid, output_dim)` and the final states
    in that order.

    `kernels`: `(recurrent, projection or None)`, each as `step_matmul`
    (a key of `_STEP_MATMULS`, a Python string, so that each kind is traced
    apart) takes it: `"stock"`: float32/bfloat16 tensors, `kernel_matmul`'s products;
    `"streamed"`: kernels bilm's kernel takes, at every step (no step has
    more rows than `streamed_rows_limit` of the kernels); `"by_rows"`:
    `(kernel, stock form, limit)` choices, chosen per step by its rows."""
    matmul = _STEP_MATMULS[step_matmul]
    recurrent_kernel, projection_kernel = kernels
    outputs_ta = tf.TensorArray(gates.dtype, size=tf.shape(active)[0], infer_shape=False,
                                element_shape=tf.TensorShape([None, h0.shape[1]]))

    def step(t, c, h, outputs_ta):
        n, start = active[t], offsets[t]
        gates_t = gates[start:start + n] if gate_index is None else tf.gather(gates, gate_index[start:start + n])
        cell = lstm_cell_step(gates_t, c[:n], h[:n], recurrent_kernel, projection_kernel, cell_clip, proj_clip,
                              matmul)
        # Rows past their length (the last ones) keep their state.
        new_c, new_h = tf.concat([cell.new_c, c[n:]], axis=0), tf.concat([cell.new_h, h[n:]], axis=0)
        new_c.set_shape(c.shape)
        new_h.set_shape(h.shape)
        return t + 1, new_c, new_h, outputs_ta.write(t, cell.new_h)

    _, c, h, outputs_ta = tf.while_loop(
        lambda t, *_: t < tf.shape(active)[0], step, (tf.constant(0), c0, h0, outputs_ta))
    outputs = tf.cond(tf.shape(active)[0] > 0, outputs_ta.concat,
                      lambda: tf.zeros([0, tf.shape(h0)[1]], gates.dtype))
    return outputs, c, h
