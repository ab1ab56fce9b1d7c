"""int8 kernels with per-column scales: the quantization's bound, and the products that take them."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.ops.lowbit_matmul import inference_kernel_matmul, stock_kernels
from bilm.ops.matmul_dtype import kernel_matmul
from bilm.ops.scaled_kernel import INT8_LEVELS, ScaledKernel, dequantize, quantize_columns


def test_each_column_is_scaled_to_127_and_off_by_at_most_half_a_step():
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(40, 9)) * np.array([1e-3, 0.1, 1, 10, 1e3, 1, 1, 1, 0])  # a zero column last
    kernel[3, 2] = 25.0  # an outlier widens only its own column's step
    values, scale = quantize_columns(kernel)
    assert values.dtype == np.int8 and scale.dtype == np.float32 and scale.shape == (9,)
    np.testing.assert_array_equal(np.abs(values[:, :8]).max(axis=0), INT8_LEVELS)
    np.testing.assert_allclose(scale[:8], np.abs(kernel[:, :8]).max(axis=0) / INT8_LEVELS, rtol=1e-6)
    assert scale[8] == 1.0 and not values[:, 8].any()
    error = np.abs(values * scale.astype(np.float64) - kernel)
    assert np.all(error <= scale * (0.5 + 1e-6))
    np.testing.assert_allclose(dequantize(ScaledKernel(tf.constant(values), tf.constant(scale))).numpy(),
                               values * scale, rtol=1e-7)
    with pytest.raises(ValueError, match=r"2-D kernel. Received: shape=\(3,\)"):
        quantize_columns(np.zeros(3))


@pytest.mark.parametrize("rows", [1, 5, 64, 65, 200])
def test_products_with_int8_kernels_equal_float64_over_the_dequantized_kernel(rows):
    # bilm's kernel (few rows) and the stock product (more rows, or inside
    # stock_kernels()) both keep x and the sums in float32.
    rng = np.random.default_rng(rows)
    values, scale = quantize_columns(rng.normal(size=(70, 33)))
    kernel = ScaledKernel(tf.constant(values), tf.constant(scale))
    x = rng.normal(size=(rows, 70)).astype(np.float32)
    want = x.astype(np.float64) @ (values * scale.astype(np.float64))
    for product in (kernel_matmul(x, kernel), inference_kernel_matmul(x, kernel)):
        np.testing.assert_allclose(product.numpy(), want, rtol=1e-4, atol=1e-4)
    with stock_kernels():
        np.testing.assert_allclose(inference_kernel_matmul(x, kernel).numpy(), want, rtol=1e-4, atol=1e-4)
