"""The opt-in bfloat16 matmul of training: what is rounded, its gradients, and unknown dtypes."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.highway import Highway
from bilm.ops.matmul_dtype import matmul

# bfloat16 keeps 8 significant bits: one rounding to nearest is off by at
# most half a unit in the last place, 2**-8 relative.
BF16_ROUNDING = 2.0 ** -8


def to_bfloat16_and_back(x):
    return tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy().astype(np.float64)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True)])
def test_bfloat16_matmul_rounds_operands_and_result_once(transpose_a, transpose_b):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 300) if not transpose_a else (300, 40)).astype(np.float32)
    b = rng.normal(size=(300, 24) if not transpose_b else (24, 300)).astype(np.float32)
    got = matmul(a, b, "bfloat16", transpose_a=transpose_a, transpose_b=transpose_b).numpy()
    a64, b64 = to_bfloat16_and_back(a), to_bfloat16_and_back(b)
    exact = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    assert got.dtype == np.float32 and got.shape == (40, 24)
    # Accumulated in float32 and rounded once: within one bfloat16 rounding
    # of the exact product of the rounded operands (a bfloat16 accumulation
    # over 300 terms would be off by far more).
    np.testing.assert_array_less(np.abs(got - exact), BF16_ROUNDING * np.abs(exact) + 1e-6)
    full = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
    assert np.abs(got - full).max() > 1e-3  # the operands really were rounded
    np.testing.assert_allclose(matmul(a, b, "float32", transpose_a, transpose_b).numpy(), full, rtol=1e-4, atol=1e-4)


def test_bfloat16_matmul_gradients_are_close_to_float32_ones():
    rng = np.random.default_rng(1)
    a = tf.constant(rng.normal(size=(30, 64)), tf.float32)
    b = tf.constant(rng.normal(size=(64, 20)), tf.float32)
    upstream = tf.constant(rng.normal(size=(30, 20)), tf.float32)
    grads = {}
    for dtype in ("float32", "bfloat16"):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            y = tf.reduce_sum(matmul(a, b, dtype) * upstream)
        grads[dtype] = [g.numpy() for g in tape.gradient(y, [a, b])]
        assert all(g.dtype == np.float32 for g in grads[dtype])
    for g16, g32 in zip(grads["bfloat16"], grads["float32"]):
        np.testing.assert_allclose(g16, g32, rtol=0.03, atol=0.03 * np.abs(g32).max())
        assert not np.array_equal(g16, g32)


def test_unknown_matmul_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="matmul_dtype must be one of 'float32', 'bfloat16', got 'float16'"):
        matmul(tf.ones([2, 2]), tf.ones([2, 2]), "float16")
    with pytest.raises(ValueError, match="matmul_dtype must be one of"):
        Highway(1, matmul_dtype="half")
