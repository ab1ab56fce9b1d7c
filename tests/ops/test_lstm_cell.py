"""lstm_cell_step: one TF1 LSTMCell step (i, j, f, o; forget bias 1; clipping; projection) against NumPy."""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.ops.lstm_cell import lstm_cell_step, projection_stand_in

BATCH, INPUT_DIM, UNITS, OUTPUT_DIM = 3, 4, 5, 2
CELL_CLIP, PROJ_CLIP = 1.0, 0.3


def _case(seed=0):
    """Inputs, a state and kernels large enough that both clips bite."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(BATCH, INPUT_DIM))
    c = rng.normal(size=(BATCH, UNITS), scale=2.0)
    h = rng.normal(size=(BATCH, OUTPUT_DIM))
    w_x = rng.normal(size=(INPUT_DIM, 4 * UNITS))
    w_h = rng.normal(size=(OUTPUT_DIM, 4 * UNITS))
    bias = rng.normal(size=4 * UNITS)
    w_p = rng.normal(size=(UNITS, OUTPUT_DIM))
    return [a.astype(np.float32) for a in (x, c, h, w_x, w_h, bias, w_p)]


def _step(x, c, h, w_x, w_h, bias, w_p, cell_clip, proj_clip):
    gates_t = tf.constant(x @ w_x + bias)  # the input half, as the layers precompute it
    return lstm_cell_step(gates_t, tf.constant(c), tf.constant(h), tf.constant(w_h),
                          None if w_p is None else tf.constant(w_p), cell_clip, proj_clip)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _reference(x, c, h, w_x, w_h, bias, w_p, cell_clip, proj_clip):
    return R.lstm_cell_step(x, c, h, np.concatenate([w_x, w_h]), bias, w_p, cell_clip, proj_clip)


def test_the_clipped_state_and_projected_output_equal_numpy():
    x, c, h, w_x, w_h, bias, w_p = case = _case()
    cell = _step(*case, CELL_CLIP, PROJ_CLIP)
    want_c, want_h = _reference(*case, CELL_CLIP, PROJ_CLIP)
    np.testing.assert_allclose(cell.new_c.numpy(), want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cell.new_h.numpy(), want_h, rtol=1e-5, atol=1e-6)
    # Before clipping: the same step without the clips.
    raw_c, _ = _reference(*case, None, None)
    _, raw_h = _reference(*case, CELL_CLIP, None)
    np.testing.assert_allclose(cell.raw_c.numpy(), raw_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cell.raw_h.numpy(), raw_h, rtol=1e-5, atol=1e-6)
    # Both clips bite in this case.
    assert np.abs(raw_c).max() > CELL_CLIP and np.abs(cell.new_c.numpy()).max() == pytest.approx(CELL_CLIP)
    assert np.abs(raw_h).max() > PROJ_CLIP and np.abs(cell.new_h.numpy()).max() == pytest.approx(PROJ_CLIP)


def test_the_gates_are_i_j_f_o_with_the_forget_bias_of_one():
    x, c, h, w_x, w_h, bias, w_p = case = _case(1)
    cell = _step(*case, CELL_CLIP, PROJ_CLIP)
    z = x.astype(np.float64) @ w_x + bias + h @ w_h
    zi, zj, zf, zo = np.split(z, 4, axis=1)
    for got, want in zip(cell.gates, (_sigmoid(zi), np.tanh(zj), _sigmoid(zf + 1.0), _sigmoid(zo))):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cell.tanh_c.numpy(), np.tanh(cell.new_c.numpy()), rtol=1e-6)
    np.testing.assert_allclose(cell.m.numpy(), _sigmoid(zo) * np.tanh(cell.new_c.numpy()), rtol=1e-5, atol=1e-6)


def test_without_projection_or_clips_the_output_is_m_and_nothing_is_clipped():
    x, c, h, w_x, w_h, bias, _ = _case(2)
    h = np.random.default_rng(3).normal(size=(BATCH, UNITS)).astype(np.float32)
    w_h = np.random.default_rng(4).normal(size=(UNITS, 4 * UNITS)).astype(np.float32)
    case = (x, c, h, w_x, w_h, bias, None)
    cell = _step(*case, None, None)
    want_c, want_h = _reference(*case, None, None)
    np.testing.assert_allclose(cell.new_c.numpy(), want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cell.new_h.numpy(), want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(cell.raw_c.numpy(), cell.new_c.numpy())
    assert cell.new_h is cell.m and cell.raw_h is cell.m
    assert np.abs(want_c).max() > CELL_CLIP  # a clip would have changed it


def test_bfloat16_kernels_give_float32_results_close_to_float32_kernels():
    x, c, h, w_x, w_h, bias, w_p = _case(5)
    gates_t = tf.constant(x @ w_x + bias)
    steps = [lstm_cell_step(gates_t, tf.constant(c), tf.constant(h), tf.cast(w_h, dtype), tf.cast(w_p, dtype),
                            CELL_CLIP, PROJ_CLIP) for dtype in (tf.float32, tf.bfloat16)]
    for name in ("new_c", "new_h"):
        full, rounded = (getattr(step, name) for step in steps)
        assert rounded.dtype == tf.float32
        np.testing.assert_allclose(rounded.numpy(), full.numpy(), atol=0.05)
    assert not np.array_equal(steps[0].raw_h.numpy(), steps[1].raw_h.numpy())


def test_a_missing_projection_has_an_empty_stand_in():
    kernel, used = projection_stand_in(None, tf.bfloat16)
    assert kernel.shape == (0, 0) and kernel.dtype == tf.bfloat16 and used is False
    projection = tf.ones([UNITS, OUTPUT_DIM])
    assert projection_stand_in(projection, tf.float32) == (projection, True)
