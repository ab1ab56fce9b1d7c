"""The dtypes of the large matmuls: training's operand dtype and inference's kernel dtype.

The public API names the two apart:

- `matmul_dtype` (training: the options' `"matmul_dtype"`, `--matmul_dtype`
  of the training scripts; `training_matmul_dtype` of `build_bilm`,
  `ProjectedLSTM` and `Highway`) is the dtype the operands of each
  training-step product of the largest matmuls (highway, the LSTMs' input
  half, the sampled softmax) are rounded to: `"float32"` (the default,
  the original recipe's arithmetic) or `"bfloat16"`, which accumulates in
  float32 and rounds the result to bfloat16; their gradients are bfloat16
  matmuls too. The variables, the optimizer's slots, the LSTM recurrence and
  cell state and the losses stay float32, and evaluation is float32.
- `kernel_dtype` (inference: `bilm.load`, `ELMo`,
  `BidirectionalLanguageModel`, `ELMoEmbedding`, the embedding scripts'
  `--kernel_dtype`; `build_bilm`, `ProjectedLSTM`, `Highway`) is the dtype
  the large kernels (the LSTMs' input, recurrent and projection kernels, the
  highway's) are *stored* in, one of `KERNEL_DTYPES`: `"float32"`,
  `"bfloat16"` (rounded once when assigned, e.g. by
  `bilm.io.formats.weight_file.load_bilm_weights`; vectors within
  `BFLOAT16_INFERENCE_TOLERANCE` of float32's) or `"int8"` (one float32
  scale per output column, `bilm.ops.scaled_kernel`; within
  `INT8_INFERENCE_TOLERANCE`). The layers multiply float32 activations by
  such a kernel and get float32: products of at most `MAX_STREAMED_ROWS`
  rows (of any number, with bfloat16 where bilm's kernel takes it as dot
  products) run bilm's own kernel (`bilm.ops.lowbit_matmul`), larger ones
  `kernel_matmul` (a bfloat16 product where the device has fast ones, else
  float32 with the kernel widened). The biases, the states and every
  elementwise step are float32. Layers with such kernels
  are for inference: they refuse `training=True`.

Which dtype is fastest where is in docs/performance.md.
"""
import tensorflow as tf

from bilm.ops.batch_invariant import batch_invariant_matmul
from bilm.ops.kernel_dtypes import (  # noqa: F401 (the dtypes' names, read here by long habit)
    BFLOAT16_INFERENCE_TOLERANCE,
    INT8_INFERENCE_TOLERANCE,
    KERNEL_DTYPES,
    MATMUL_DTYPES,
    check_kernel_dtype,
    check_matmul_dtype,
)
from bilm.ops.placement import bfloat16_products_fast
from bilm.ops.scaled_kernel import ScaledKernel, dequantize


def matmul(a, b, matmul_dtype="float32", transpose_a=False, transpose_b=False):
    """`a @ b` (2-D, float32 in and out) with operands of `matmul_dtype`.

    Args:
        a, b: float32 matrices (tensors or variables).
        matmul_dtype: `"float32"`, or `"bfloat16"` to round both operands
            (and so the result) to bfloat16.

    Returns:
        float32 `(rows of a, columns of b)` (after the transposes).
    """
    if check_matmul_dtype(matmul_dtype) == "float32":
        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    product = tf.matmul(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16),
                        transpose_a=transpose_a, transpose_b=transpose_b)
    return tf.cast(product, tf.float32)


def kernel_matmul(x, kernel):
    """`x @ kernel` for float32 `x`, in the kernel's dtype.

    A float32 kernel: a float32 matmul whose rows do not depend on the other rows
    (`bilm.ops.batch_invariant`). A bfloat16 kernel (a layer built
    with `kernel_dtype="bfloat16"`): on a GPU, or a CPU with bfloat16 arithmetic, `x`
    is rounded to bfloat16, the product accumulates in float32 and is
    rounded to bfloat16 once; elsewhere, where that product is slower than
    float32's, a float32 matmul with the kernel widened (exactly), as
    bilm's own kernel computes products of few rows. A `ScaledKernel`
    (int8): a float32 matmul with the widened kernel. (For many products
    with one kernel, widen it once: `stock_form`.)

    Args:
        x: float32 `(rows, n)`.
        kernel: float32 or bfloat16 `(n, m)` (tensor or variable), or a
            `bilm.ops.scaled_kernel.ScaledKernel`.

    Returns:
        float32 `(rows, m)`.
    """
    kernel = stock_form(kernel)
    if tf.as_dtype(kernel.dtype) == tf.float32:
        return batch_invariant_matmul(x, kernel)
    return tf.cast(tf.matmul(tf.cast(x, kernel.dtype), kernel), tf.float32)


def stock_form(kernel):
    """`kernel` as stock TensorFlow products take it (`kernel_matmul`),
    made once for many of them (a loop's steps): a `ScaledKernel` widened
    to float32 (`dequantize`); a bfloat16 kernel widened to float32
    (exactly) where TensorFlow's bfloat16 product is slower than float32's,
    a CPU without bfloat16 arithmetic (`bilm.ops.placement.bfloat16_products_fast`:
    decided by the device the product runs on); anything else (a tensor,
    or None) as it is."""
    if isinstance(kernel, ScaledKernel):
        return dequantize(kernel)
    if kernel is not None and tf.as_dtype(kernel.dtype) == tf.bfloat16 and not bfloat16_products_fast():
        return tf.cast(kernel, tf.float32)
    return kernel
