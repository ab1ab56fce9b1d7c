"""bilm's native recurrence, product and char convolutions on NumPy arrays (`bilm.ops.native.portable_kernels`,
what PyTorch and Keras's NumPy backend run without gradients) against an LSTM, a product and windows in float64
NumPy: the same values to float32 round-off, zeros past each row's length, each row the same bytes alone as beside
others; and arrays of the wrong shapes refused in one line before the library reads them."""
import ml_dtypes
import numpy as np
import pytest

from bilm.ops.native import portable_kernels


def float64_steps(gates_tm, lengths, c, h, recurrent, projection, cell_clip, proj_clip):
    """The LSTM's steps in float64, row by row: `(outputs_tm, c, h)`, the forget bias 1."""
    sigmoid = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
    c, h = c.astype(np.float64), h.astype(np.float64)
    outputs = np.zeros((*gates_tm.shape[:2], h.shape[1]))
    for t, gates in enumerate(gates_tm.astype(np.float64)):
        i, j, f, o = np.split(gates + h @ recurrent, 4, axis=-1)
        new_c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)
        new_c = new_c if cell_clip is None else np.clip(new_c, -cell_clip, cell_clip)
        new_h = sigmoid(o) * np.tanh(new_c)
        if projection is not None:
            new_h = new_h @ projection
            new_h = new_h if proj_clip is None else np.clip(new_h, -proj_clip, proj_clip)
        inside = (t < lengths)[:, None]
        c, h = np.where(inside, new_c, c), np.where(inside, new_h, h)
        outputs[t] = np.where(inside, new_h, 0.0)
    return outputs, c, h


@pytest.mark.parametrize("projected", [True, False])
def test_the_native_steps_equal_a_float64_lstm_and_give_each_row_the_same_bytes_alone(projected):
    rng = np.random.default_rng(5)
    time, batch, units = 7, 11, 40  # 11 rows: groups of 8 and the rest; 160 gate columns: whole tiles and more
    output_dim = 24 if projected else units
    lengths = rng.integers(0, time + 1, batch)
    lengths[3] = time
    gates = rng.normal(size=(time, batch, 4 * units)).astype(np.float32) * 2
    c0 = rng.normal(size=(batch, units)).astype(np.float32)
    h0 = rng.normal(size=(batch, output_dim)).astype(np.float32)
    recurrent = rng.normal(size=(output_dim, 4 * units)).astype(np.float32) / np.sqrt(output_dim)
    projection = rng.normal(size=(units, output_dim)).astype(np.float32) / np.sqrt(units) if projected else None
    clips = (1.5, 0.7) if projected else (1.5, None)

    native = portable_kernels.lstm_steps(gates, lengths, c0, h0, recurrent, projection, *clips)
    expected = float64_steps(gates, lengths, c0, h0, recurrent, projection, *clips)
    for value, reference in zip(native, expected):
        assert value.dtype == np.float32 and value.shape == reference.shape
        np.testing.assert_allclose(value, reference, rtol=0, atol=2e-6)
    for row, length in enumerate(lengths):
        assert not native[0][length:, row].any()
    for row in (0, 3, batch - 1):
        alone = portable_kernels.lstm_steps(gates[:, row:row + 1], lengths[row:row + 1], c0[row:row + 1],
                                               h0[row:row + 1], recurrent, projection, *clips)
        assert alone[0].tobytes() == native[0][:, row:row + 1].tobytes()
        assert alone[1].tobytes() == native[1][row:row + 1].tobytes()
        assert alone[2].tobytes() == native[2][row:row + 1].tobytes()


def test_steps_or_none_declines_what_the_library_does_not_take():
    rng = np.random.default_rng(6)
    gates = rng.normal(size=(3, 2, 8)).astype(np.float32)
    state = (np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32), np.zeros((2, 8), np.float32), None)
    valid = np.array([[True, True], [True, False], [False, False]])[..., None]
    assert portable_kernels.steps_or_none(gates, valid, *state, None, None) is not None
    holes = valid.copy()
    holes[0, 0] = False  # row 0 skips its first step: not each row's first steps
    assert portable_kernels.steps_or_none(gates, holes, *state, None, None) is None
    assert portable_kernels.steps_or_none(gates.astype(np.float64), valid, *state, None, None) is None


def test_arrays_of_the_wrong_shape_are_refused_in_one_line_naming_the_array():
    gates = np.zeros((3, 2, 16), np.float32)
    with pytest.raises(ValueError, match=r"recurrent_kernel has shape \(4, 12\), expected \(4, 16\)"):
        portable_kernels.lstm_steps(gates, np.array([3, 1]), np.zeros((2, 4), np.float32),
                                       np.zeros((2, 4), np.float32), np.zeros((4, 12), np.float32), None, None, None)
    with pytest.raises(ValueError, match=r"without a projection_kernel, initial_h must have initial_c's 4 columns"):
        portable_kernels.lstm_steps(gates, np.array([3, 1]), np.zeros((2, 4), np.float32),
                                       np.zeros((2, 3), np.float32), np.zeros((3, 16), np.float32),
                                       None, None, None)


def test_the_native_product_equals_float64_numpy_and_gives_each_row_the_same_bytes_at_any_row_count():
    rng = np.random.default_rng(7)
    n, m = 200, 100  # 100 columns: whole tiles of 32 and the rest
    kernel = rng.normal(size=(n, m)).astype(np.float32)
    x = rng.normal(size=(70, n)).astype(np.float32)  # from 32 rows on, the kernel is copied into tiles first
    product = portable_kernels.matmul(x, kernel)
    assert product.dtype == np.float32 and product.shape == (70, m)
    np.testing.assert_allclose(product, x.astype(np.float64) @ kernel.astype(np.float64), rtol=0, atol=1e-4)
    for rows in (1, 5, 8, 33):
        assert portable_kernels.matmul(x[:rows], kernel).tobytes() == product[:rows].tobytes()
    with pytest.raises(ValueError, match=r"x \(70, 200\) and kernel \(100, 200\) are not \(rows, n\) and \(n, m\)"):
        portable_kernels.matmul(x, kernel.T)


def _bfloat16_bits(x):
    """float32 `x` rounded to the nearest bfloat16 (ties to even), as its bits (uint16)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _widened(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_bfloat16_kernels_as_bits_give_the_widened_kernels_values_to_bfloat16_round_off():
    rng = np.random.default_rng(3)
    time, batch, units, output_dim = 6, 3, 32, 16
    gates = rng.normal(size=(time, batch, 4 * units)).astype(np.float32)
    recurrent = _bfloat16_bits(rng.normal(size=(output_dim, 4 * units)) * 0.3)
    projection = _bfloat16_bits(rng.normal(size=(units, output_dim)) * 0.3)
    zeros_c, zeros_h = np.zeros((batch, units), np.float32), np.zeros((batch, output_dim), np.float32)
    lengths = [6, 2, 4]
    got = portable_kernels.lstm_steps(gates, lengths, zeros_c, zeros_h, recurrent, projection, 3.0, 3.0)
    want = portable_kernels.lstm_steps(gates, lengths, zeros_c, zeros_h, _widened(recurrent), _widened(projection),
                                       3.0, 3.0)
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and np.abs(g - w).max() < 2e-2 * max(1.0, np.abs(w).max())
    assert np.all(got[0][2:, 1] == 0)  # past the second row's length
    # Keras's NumPy backend's bfloat16 arrays (ml_dtypes) are taken as the same bits.
    valid = np.arange(time)[:, None] < np.array(lengths)[None, :]
    as_bfloat16 = portable_kernels.steps_or_none(gates, valid, zeros_c, zeros_h, recurrent.view(ml_dtypes.bfloat16),
                                                 projection.view(ml_dtypes.bfloat16), 3.0, 3.0)
    for g, b in zip(got, as_bfloat16):
        assert g.tobytes() == b.tobytes()
    x = rng.normal(size=(5, output_dim)).astype(np.float32)
    product = portable_kernels.matmul(x, recurrent)
    np.testing.assert_allclose(product, x.astype(np.float64) @ _widened(recurrent), rtol=0, atol=5e-2)
    # Each row the same bytes alone.
    np.testing.assert_array_equal(portable_kernels.matmul(x[:1], recurrent), product[:1])


def test_gates_picked_by_an_index_and_a_bias_are_read_in_place_as_the_same_bytes_and_bad_ones_are_refused():
    rng = np.random.default_rng(4)
    time, batch, units = 5, 4, 8
    distinct = rng.normal(size=(3, 4 * units)).astype(np.float32)
    gate_index = rng.integers(0, 3, (time, batch)).astype(np.int32)
    lengths = np.array([5, 0, 2, 4])
    state = np.zeros((batch, units), np.float32), np.zeros((batch, units), np.float32)
    recurrent = (rng.normal(size=(units, 4 * units)) * 0.5).astype(np.float32)
    bias = rng.normal(size=4 * units).astype(np.float32)
    in_place = portable_kernels.lstm_steps(distinct, lengths, *state, recurrent, None, 0.8, None, gate_index=gate_index)
    given = portable_kernels.lstm_steps(distinct[gate_index], lengths, *state, recurrent, None, 0.8, None)
    with_bias = portable_kernels.lstm_steps(distinct, lengths, *state, recurrent, None, 0.8, None,
                                            gate_index=gate_index, bias=bias)
    bias_given = portable_kernels.lstm_steps((distinct + bias)[gate_index], lengths, *state, recurrent, None, 0.8,
                                             None)
    for a, b, c, d in zip(in_place, given, with_bias, bias_given):
        assert a.tobytes() == b.tobytes() and c.tobytes() == d.tobytes() and not np.array_equal(a, c)
    with pytest.raises(ValueError, match=r"bias has shape \(31,\), expected \(32,\)"):
        portable_kernels.lstm_steps(distinct, lengths, *state, recurrent, None, 0.8, None, gate_index=gate_index,
                                    bias=bias[1:])
    past = gate_index.copy()
    past[1, 0] = 3  # one row past the three
    with pytest.raises(ValueError, match=r"gate_index reads rows 0 to 3 of gates_tm's 3"):
        portable_kernels.lstm_steps(distinct, lengths, *state, recurrent, None, 0.8, None, gate_index=past)
    beyond = gate_index.copy()
    beyond[:, 1], beyond[4, 2] = 7, -1  # past rows' lengths (row 1 has none): never read
    unread = portable_kernels.lstm_steps(distinct, lengths, *state, recurrent, None, 0.8, None, gate_index=beyond)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(unread, in_place))
    with pytest.raises(ValueError, match=r"the kernels are uint16 \(recurrent\) and float32 \(projection\)"):
        portable_kernels.lstm_steps(distinct, lengths, *state, recurrent.view(np.uint16)[:, ::2], recurrent[:, :units],
                                    0.8, None, gate_index=gate_index)


def test_the_native_char_convolutions_equal_float64_windows_and_give_each_token_the_same_bytes_alone():
    rng = np.random.default_rng(3)
    filters = [(1, 8), (2, 24), (3, 64), (5, 70)]  # 70: whole vector lanes and the rest
    embedding = rng.uniform(-1, 1, (262, 4)).astype(np.float32)
    kernels = [rng.normal(0, 0.5, (width, 4, num)).astype(np.float32) for width, num in filters]
    ids = rng.integers(1, 261, size=(45, 12)).astype(np.int32)
    ids[np.arange(12)[None, :] >= rng.integers(1, 8, size=45)[:, None]] = 260  # rows end in a run of padding
    ids[-2:] = 0  # padding rows
    tables = portable_kernels.char_tables(embedding, kernels)
    pooled = portable_kernels.char_max_pooled(ids, tables)
    assert pooled.dtype == np.float32 and pooled.shape == (45, sum(num for _, num in filters))
    embedded = embedding.astype(np.float64)[ids]
    want = np.concatenate([np.max([np.einsum("nkd,kdm->nm", embedded[:, p:p + width], kernel.astype(np.float64))
                                   for p in range(12 - width + 1)], axis=0) for kernel, (width, _) in
                           zip(kernels, filters)], axis=1)
    np.testing.assert_allclose(pooled, want, rtol=0, atol=1e-5)
    for rows in (slice(0, 1), slice(7, 8), slice(3, 40)):
        assert portable_kernels.char_max_pooled(ids[rows], tables).tobytes() == pooled[rows].tobytes()
    assert portable_kernels.char_max_pooled(ids[:0], tables).shape == (0, pooled.shape[1])


def test_char_ids_past_the_embedding_and_kernels_that_do_not_fit_are_refused_in_one_line():
    embedding, kernel = np.zeros((262, 4), np.float32), np.zeros((3, 4, 8), np.float32)
    tables = portable_kernels.char_tables(embedding, [kernel])
    with pytest.raises(ValueError, match=r"char ids from 0 to 262, and the char embedding has 262 rows"):
        portable_kernels.char_max_pooled(np.array([[0, 262, 5]]), tables)
    with pytest.raises(ValueError, match=r"a filter of width 3 over 2 columns of char ids"):
        portable_kernels.char_max_pooled(np.array([[1, 2]]), tables)
    with pytest.raises(ValueError, match=r"a kernel of shape \(3, 5, 8\) for a char embedding of shape \(262, 4\)"):
        portable_kernels.char_tables(embedding, [np.zeros((3, 5, 8), np.float32)])
