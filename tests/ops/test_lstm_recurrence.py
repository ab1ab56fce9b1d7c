"""The inference recurrences: the packed graph loop against the numpy reference and the XLA loop
(padded time, empty rows and batches included), its layout and its gradients."""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.ops import placement
from bilm.ops.lowbit_matmul import (
    MAX_STREAMED_ROWS,
    bfloat16_dot_products,
    load_lowbit_ops,
    stock_kernels,
    streams_float32,
)
from bilm.ops.lstm_recurrence import lstm_recurrence_packed, packed_steps, padded_size
from bilm.ops.scaled_kernel import ScaledKernel, dequantize, quantize_columns
from helpers import graph_op_types


@pytest.mark.parametrize("go_backwards, projection", [(False, 4), (True, 4), (False, None)])
def test_xla_recurrence_equals_the_graph_recurrence(go_backwards, projection):
    # Time 5 is padded to 8 inside; an empty row keeps its initial state.
    x = tf.random.stateless_normal([4, 5, 6], seed=[5, 6])
    lengths = tf.constant([5, 2, 0, 4])
    output_dim = projection or 8
    state = [tf.random.stateless_normal([4, 8], seed=[7, 8]),
             tf.random.stateless_normal([4, output_dim], seed=[9, 1])]
    results, weights = [], None
    for jit_compile in (False, True):
        layer = ProjectedLSTM(8, projection, 0.5, 0.3, go_backwards=go_backwards, jit_compile=jit_compile)
        layer.build(x.shape)
        if weights is None:  # large enough that both clips act
            weights = [np.random.default_rng(0).normal(size=w.shape).astype(np.float32) for w in layer.weights]
        layer.set_weights(weights)
        assert layer.uses_xla is jit_compile
        results.append(layer(x, lengths, state))
    for a, b in zip(*results):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6)
    np.testing.assert_array_equal(results[1][1].numpy()[2], state[0].numpy()[2])
    assert results[1][0].shape == (4, 5, output_dim)
    for empty in (x[:0], x[:, :0]):  # no rows, no steps
        n = empty.shape[0]
        out, c, h = layer(empty, tf.zeros([n], tf.int32), [s[:n] for s in state])
        assert out.shape == tuple(empty.shape[:2]) + (output_dim,)
        np.testing.assert_array_equal(c.numpy(), state[0].numpy()[:n])


def test_packed_steps_visit_each_row_within_its_length_longest_first():
    steps = packed_steps(tf.constant([2, 0, 3, 2]), go_backwards=False)
    np.testing.assert_array_equal(steps.order.numpy(), [2, 0, 3, 1])  # stable among equal lengths
    np.testing.assert_array_equal(steps.active.numpy(), [3, 3, 1])
    np.testing.assert_array_equal(steps.offsets.numpy(), [0, 3, 6])
    np.testing.assert_array_equal(steps.positions.numpy(),
                                  [[2, 0], [0, 0], [3, 0], [2, 1], [0, 1], [3, 1], [2, 2]])
    backwards = packed_steps(tf.constant([2, 0, 3, 2]), go_backwards=True)
    np.testing.assert_array_equal(backwards.positions.numpy(),
                                  [[2, 2], [0, 1], [3, 1], [2, 1], [0, 0], [3, 0], [2, 0]])
    empty = packed_steps(tf.zeros([3], tf.int32))
    assert empty.active.shape == (0,) and empty.positions.shape == (0, 2)


@pytest.mark.parametrize("go_backwards, projection", [(False, 4), (True, 4), (True, None)])
def test_packed_inference_equals_the_numpy_reference(go_backwards, projection):
    # The float32 packed loop computes what the padded loop computed, to
    # float32 round-off: unsorted lengths, an empty row, initial states,
    # dense inputs and distinct rows with an index.
    rng = np.random.default_rng(4)
    lengths = np.array([3, 6, 0, 6, 1])
    index = rng.integers(0, 5, size=(5, 6))
    rows = rng.normal(size=(1, 5, 6)).astype(np.float32)
    x = rows[0][index]
    output_dim = projection or 8
    c0, h0 = rng.normal(size=(5, 8)).astype(np.float32), rng.normal(size=(5, output_dim)).astype(np.float32)
    layer = ProjectedLSTM(8, projection, 0.5, 0.3, go_backwards=go_backwards)
    layer.build((None, None, 6))
    layer.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in layer.weights])
    kernels = {w.name: w.numpy() for w in layer.weights}
    w_0 = np.concatenate([kernels["input_kernel"], kernels["recurrent_kernel"]])
    want = R.lstm_layer(x, lengths, w_0, kernels["bias"], kernels.get("projection_kernel"), 0.5, 0.3,
                        reverse=go_backwards, init_c=c0, init_h=h0)
    dense = layer(tf.constant(x), tf.constant(lengths), [tf.constant(c0), tf.constant(h0)])
    distinct = layer(tf.constant(rows), tf.constant(lengths), [tf.constant(c0), tf.constant(h0)],
                     token_index=tf.constant(index))
    for got in (dense, distinct):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b, atol=2e-6)


def test_packed_inference_gradients_equal_the_xla_recurrence_ones():
    x = tf.random.stateless_normal([4, 5, 6], seed=[2, 3])
    lengths = tf.constant([2, 5, 0, 4])
    grads, weights = [], None
    for jit_compile in (False, True):
        layer = ProjectedLSTM(8, 4, 3.0, 3.0, go_backwards=True, jit_compile=jit_compile)
        layer.build(x.shape)
        if weights is None:
            weights = [w.numpy() for w in layer.weights]
        layer.set_weights(weights)
        with tf.GradientTape() as tape:
            tape.watch(x)
            out, c, h = layer(x, lengths)
            loss = tf.reduce_sum(out ** 2) + tf.reduce_sum(c) + tf.reduce_sum(h * h)
        grads.append(tape.gradient(loss, [x] + layer.trainable_weights))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-5)


@pytest.mark.parametrize("distinct", [False, True])
def test_packed_inference_takes_no_rows_and_rows_without_steps(distinct):
    layer = ProjectedLSTM(8, 4, 3.0, 3.0, go_backwards=True)
    for n in (0, 3):  # no rows; rows that are all padding
        state = [tf.random.stateless_normal([n, 8], seed=[1, n]), tf.random.stateless_normal([n, 4], seed=[2, n])]
        inputs = tf.ones([1, 2, 6]) if distinct else tf.ones([n, 5, 6])
        out, c, h = layer(inputs, tf.zeros([n], tf.int32), state,
                          token_index=tf.zeros([n, 5], tf.int32) if distinct else None)
        assert out.shape == (n, 5, 4)
        np.testing.assert_array_equal(out.numpy(), 0.0)
        np.testing.assert_array_equal(c.numpy(), state[0].numpy())
        np.testing.assert_array_equal(h.numpy(), state[1].numpy())


def test_xla_time_buckets_cover_the_length_with_little_padding():
    times = np.arange(1, 1100)
    buckets = np.array([int(padded_size(tf.constant(int(t)))) for t in times])
    assert np.all(buckets >= times) and np.all(buckets % 16 == 0)
    assert np.all(buckets[times > 128] <= times[times > 128] * 1.25)
    assert len(np.unique(buckets)) < 40  # few shapes to compile


def _bfloat16_layer(units=64, projection=16, input_dim=12):
    layer = ProjectedLSTM(units, projection, 3.0, 3.0, kernel_dtype="bfloat16", jit_compile=False)
    layer.build((None, None, input_dim))
    rng = np.random.default_rng(3)
    layer.set_weights([(rng.normal(size=w.shape) * 0.3).astype(np.float32) for w in layer.weights])
    return layer


@pytest.mark.parametrize("bfloat16_arithmetic", [True, False])
def test_few_rows_with_bfloat16_kernels_run_bilms_kernel_as_its_cpu_multiplies_bfloat16(bfloat16_arithmetic,
                                                                                        monkeypatch):
    # Up to MAX_STREAMED_ROWS rows a step: bilm's own kernel, which widens the bfloat16
    # kernels exactly and does not round the activations, so the
    # recurrence equals a float32 one over the rounded kernels to float32
    # round-off; but on a CPU with AVX512-BF16 it takes them, at any number
    # of rows, as bfloat16 dot products, which round the activations. More rows: TensorFlow's
    # bfloat16 matmul, which rounds them, on a CPU with bfloat16
    # arithmetic; elsewhere a float32 one with the kernels widened once.
    monkeypatch.setattr(placement, "has_bfloat16_arithmetic", lambda: bfloat16_arithmetic)
    units, projection = 64, 16
    rng = np.random.default_rng(4)
    kernels = [tf.constant(rng.normal(size=shape) * 0.3, tf.bfloat16)
               for shape in ((projection, 4 * units), (units, projection))]
    for batch in (1, 2, MAX_STREAMED_ROWS + 1):
        lengths = tf.fill([batch], 9)
        steps = packed_steps(lengths)
        gates = tf.random.stateless_normal([9 * batch, 4 * units], seed=[batch, 1])
        state = (tf.zeros([batch, units]), tf.zeros([batch, projection]))
        ours = lstm_recurrence_packed(gates, None, steps, 9, *state, *kernels, 3.0, 3.0)[0].numpy()
        exact = lstm_recurrence_packed(gates, None, steps, 9, *state, *[tf.cast(k, tf.float32) for k in kernels],
                                       3.0, 3.0)[0].numpy()
        deviation = np.abs(ours - exact).max() / np.abs(exact).max()
        if bfloat16_dot_products():  # at any number of rows
            assert 1e-5 < deviation < 3e-2, (batch, deviation)
        elif batch <= MAX_STREAMED_ROWS or not bfloat16_arithmetic:
            assert deviation < 2e-6, (batch, deviation)
        else:
            assert 1e-4 < deviation < 3e-2, (batch, deviation)


def test_stock_kernels_trace_graphs_without_bilms_own_op():
    layer = _bfloat16_layer()

    def op_types(function):
        return graph_op_types(
            function.get_concrete_function(tf.TensorSpec([1, 9, 12]), tf.TensorSpec([1], tf.int32)).graph)

    run = lambda x, lengths: layer(x, lengths, training=False)[0]  # noqa: E731
    assert "BilmLowbitMatmul" in op_types(tf.function(run))
    with stock_kernels():
        assert "BilmLowbitMatmul" not in op_types(tf.function(run))
    assert "BilmLowbitMatmul" in op_types(tf.function(run))


@pytest.mark.parametrize("native_kernels", [True, False])
def test_int8_kernels_equal_float32_over_their_dequantized_kernels(native_kernels):
    # Every way a step takes an int8 kernel (bilm's kernel at every step,
    # per step by its rows, or the kernel widened once) keeps the
    # activations in float32: a float32 recurrence over `values * scale`.
    units, projection = 64, 16
    rng = np.random.default_rng(5)
    kernels = [ScaledKernel(*(tf.constant(a) for a in quantize_columns(rng.normal(size=shape) * 0.3)))
               for shape in ((projection, 4 * units), (units, projection))]
    widened = [dequantize(k) for k in kernels]
    # 70 rows of which only 3 reach past step 4: the first steps have more
    # than MAX_STREAMED_ROWS rows, the last ones fewer.
    for lengths in ([9], [9, 3], [4] * 67 + [9] * 3):
        lengths = tf.constant(lengths)
        batch, steps = lengths.shape[0], packed_steps(lengths)
        gates = tf.random.stateless_normal([int(tf.reduce_sum(lengths)), 4 * units], seed=[batch, 2])
        state = (tf.random.stateless_normal([batch, units], seed=[batch, 3]), tf.zeros([batch, projection]))
        got = lstm_recurrence_packed(gates, None, steps, 9, *state, *kernels, 3.0, 3.0,
                                     native_kernels=native_kernels)
        want = lstm_recurrence_packed(gates, None, steps, 9, *state, *widened, 3.0, 3.0)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=2e-6)


def test_a_float32_recurrence_gives_each_row_the_same_bytes_in_any_batch():
    # Every step runs bilm's op where it takes float32 (whose rows do not depend on the others), else the
    # stock products: either way a row's outputs and states are the same bytes alone or among others.
    units, projection = 64, 16
    rng = np.random.default_rng(6)
    kernels = [tf.constant(rng.normal(size=shape) * 0.3, tf.float32)
               for shape in ((projection, 4 * units), (units, projection))]
    lengths = [4] * 37 + [9] * 3 + [1, 7]
    gates = rng.normal(size=(sum(lengths), 4 * units)).astype(np.float32)
    state = (rng.normal(size=(len(lengths), units)).astype(np.float32),
             np.zeros((len(lengths), projection), np.float32))
    starts = np.cumsum([0] + lengths)

    def run(rows, native_kernels=None):
        # The rows' gates in packed order (time-major, longest first) for their own batch.
        steps = packed_steps(tf.constant([lengths[r] for r in rows]))
        by_row = [gates[starts[r]:starts[r + 1]] for r in rows]
        packed = np.stack([by_row[r][t] for r, t in steps.positions.numpy()]) if rows else gates[:0]
        return [x.numpy() for x in lstm_recurrence_packed(
            tf.constant(packed), None, steps, 9, state[0][rows], state[1][rows], *kernels, 3.0, 3.0,
            native_kernels=native_kernels)]

    everything = run(list(range(len(lengths))))
    for rows in ([40], [41, 0], list(range(5, 20)), [39, 38, 1]):
        for got, want in zip(run(rows), everything):
            assert np.array_equal(got, want[rows]), rows
    for got, want in zip(everything, run(list(range(len(lengths))), native_kernels=False)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_a_float32_layer_runs_bilms_kernels_at_every_row_count_where_they_are_built_else_none():
    layer = ProjectedLSTM(16, 4, 3.0, 3.0, jit_compile=False)
    layer.build((None, None, 12))
    graph = tf.function(lambda x, lengths: layer(x, lengths, training=False)[0]).get_concrete_function(
        tf.TensorSpec([None, 9, 12]), tf.TensorSpec([None], tf.int32)).graph
    ops = graph_op_types(graph)
    # The input half and the recurrence: bilm's kernels for any batch, or stock products (never a mix).
    assert ("BilmLowbitMatmul" in ops) == ("BilmLstmRecurrence" in ops) == streams_float32()
    assert ("StatelessWhile" in ops) != streams_float32()
    assert ("MatMul" in ops) != streams_float32()


@pytest.mark.parametrize("kernel_dtype", ["bfloat16", "int8"])
def test_a_batch_known_to_be_small_traces_only_bilms_recurrence(kernel_dtype):
    # Rows unknown at trace time need the graph loop as the other branch; a batch known to be small does not;
    # bfloat16 as bilm's dot products (a CPU with AVX512-BF16) needs it at no number of rows.
    layer = ProjectedLSTM(16, 4, 3.0, 3.0, jit_compile=False, kernel_dtype=kernel_dtype)
    layer.build((None, None, 12))
    loops = {}
    for rows in (3, MAX_STREAMED_ROWS, MAX_STREAMED_ROWS + 1, None):
        graph = tf.function(lambda x, lengths: layer(x, lengths, training=False)[0]).get_concrete_function(
            tf.TensorSpec([rows, 9, 12]), tf.TensorSpec([rows], tf.int32)).graph
        loops[rows] = {"BilmLstmRecurrence", "StatelessWhile"} & graph_op_types(graph)
    if load_lowbit_ops() is not None and kernel_dtype == "bfloat16" and bfloat16_dot_products():
        assert all(found == {"BilmLstmRecurrence"} for found in loops.values()), loops
    elif load_lowbit_ops() is not None:
        assert loops == {3: {"BilmLstmRecurrence"}, MAX_STREAMED_ROWS: {"BilmLstmRecurrence"},
                         MAX_STREAMED_ROWS + 1: {"BilmLstmRecurrence", "StatelessWhile"},
                         None: {"BilmLstmRecurrence", "StatelessWhile"}}
    else:
        assert all(found == {"StatelessWhile"} for found in loops.values())


def _kernels_of_kind(kind, rng, shapes):
    """Kernels of `kind` and the float32 kernels they stand for."""
    arrays = [(rng.normal(size=shape) * 0.3).astype(np.float32) for shape in shapes]
    if kind == "int8":
        kernels = [ScaledKernel(*(tf.constant(a) for a in quantize_columns(array))) for array in arrays]
        return kernels, [dequantize(k) for k in kernels]
    kernels = [tf.constant(array, kind) for array in arrays]
    return kernels, [tf.cast(k, tf.float32) for k in kernels]


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("projection", [16, None])
def test_bilms_recurrence_op_equals_the_graph_loop(kind, projection):
    # At most the kernels' streamed rows a step, the whole loop is one op of
    # bilm's (BilmLstmRecurrence): a float32 loop over the kernels it stands for.
    units = 32
    output_dim = projection or units
    rng = np.random.default_rng(7)
    shapes = [(output_dim, 4 * units)] + ([(units, projection)] if projection else [])
    kernels, widened = _kernels_of_kind(kind, rng, shapes)
    if not projection:
        kernels, widened = kernels + [None], widened + [None]
    for lengths in ([9], [9, 3, 0, 5]):
        lengths = tf.constant(lengths)
        batch = lengths.shape[0]
        n_valid = int(tf.reduce_sum(lengths))
        for go_backwards, gate_index in ((False, None), (True, tf.constant(rng.integers(0, 6, n_valid), tf.int32))):
            steps = packed_steps(lengths, go_backwards)
            gates = tf.random.stateless_normal([n_valid if gate_index is None else 6, 4 * units], seed=[batch, 6])
            state = (tf.random.stateless_normal([batch, units], seed=[batch, 7]),
                     tf.random.stateless_normal([batch, output_dim], seed=[batch, 8]))
            for clips in ((3.0, 3.0), (None, None), (0.5, 0.1)):
                got = lstm_recurrence_packed(gates, gate_index, steps, 9, *state, *kernels, *clips)
                want = lstm_recurrence_packed(gates, gate_index, steps, 9, *state, *widened, *clips,
                                              native_kernels=False)
                # bfloat16 dot products round the activations (a CPU with AVX512-BF16): to bfloat16's precision;
                # the products themselves are tests/ops/test_lowbit_matmul.py's.
                rounded = kind == "bfloat16" and bfloat16_dot_products()
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=2e-2 if rounded else 2e-6)


def test_gradients_through_bilms_recurrence_op_equal_the_graph_loops():
    # Its gradient re-runs the graph loop: the same as the loop's own, kernels included.
    units, projection = 16, 8
    rng = np.random.default_rng(8)
    kernels = [tf.Variable((rng.normal(size=shape) * 0.3).astype(np.float32))
               for shape in ((projection, 4 * units), (units, projection))]
    lengths = tf.constant([5, 2, 4])
    steps = packed_steps(lengths)
    gates = tf.random.stateless_normal([11, 4 * units], seed=[1, 9])
    c0 = tf.random.stateless_normal([3, units], seed=[1, 10])
    h0 = tf.random.stateless_normal([3, projection], seed=[1, 11])
    grads = []
    for native_kernels in (True, False):
        with tf.GradientTape() as tape:
            tape.watch([gates, c0, h0])
            outputs, c, h = lstm_recurrence_packed(gates, None, steps, 5, c0, h0, *kernels, 3.0, 3.0,
                                                   native_kernels=native_kernels)
            loss = tf.reduce_sum(outputs ** 2) + tf.reduce_sum(c * h[:, :1]) + tf.reduce_sum(h)
        grads.append(tape.gradient(loss, [gates, c0, h0, *kernels]))
    for a, b in zip(*grads):
        # (the gates' gradient may come as IndexedSlices)
        a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_bilms_recurrence_op_names_bad_operands():
    ops = load_lowbit_ops()
    kernel = tf.zeros([4, 16])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gate_index\[1\] = 9 is outside the gates' 2 rows"):
        ops.bilm_lstm_recurrence(tf.zeros([2, 16]), [0, 9], [1, 1], tf.zeros([1, 4]), tf.zeros([1, 4]), kernel,
                                 tf.zeros([0]), tf.zeros([0, 0]), tf.zeros([0]), cell_clip=-1.0, proj_clip=-1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="active must be non-increasing"):
        ops.bilm_lstm_recurrence(tf.zeros([3, 16]), tf.zeros([0], tf.int32), [1, 2], tf.zeros([2, 4]),
                                 tf.zeros([2, 4]), kernel, tf.zeros([0]), tf.zeros([0, 0]), tf.zeros([0]),
                                 cell_clip=-1.0, proj_clip=-1.0)
