"""Matmuls with float32 operands, or (opt-in) bfloat16 ones.

`matmul_dtype`, wherever the public API takes it (the training options,
`ELMo`, `BidirectionalLanguageModel`, `ELMoEmbedding`, the scripts), is the
dtype the large matmuls take their operands in. The layers reach it in one
of two ways, named apart: `training_matmul_dtype` rounds the operands of
each training-step product, and `kernel_dtype` stores the kernels of an
inference-only model in that dtype.

Training can run its largest matmuls (highway, the LSTMs' input half, the
sampled softmax, whose corrected biases ride in its matmul) with bfloat16
operands: `"matmul_dtype": "bfloat16"` in the options. Each such product
rounds its operands to bfloat16 (8 significant bits), accumulates in
float32 and rounds the result to bfloat16 (CPUs without bfloat16
instructions, such as AVX2 ones, also round partial sums over blocks of the
inner dimension: a few roundings, never a bfloat16 accumulation); the gradients of these matmuls
are bfloat16 matmuls too. Everything else stays float32: the variables and
the optimizer's slots, the LSTM recurrence and cell state, the losses. It
applies to training steps only; evaluation (held-out and `run_test.py`
perplexities) is float32.

Inference has its own way, `kernel_dtype` of `build_bilm`,
`ProjectedLSTM` and `Highway`: with `"bfloat16"` the layers keep their
large kernels (the LSTMs' input, recurrent and projection kernels, the
highway's) *in* bfloat16, so a kernel is rounded once, when it is assigned
(e.g. by `bilm.io.weight_file.load_bilm_weights`), every step streams half
the bytes, and there is no float32 copy that a bfloat16 one could fall
behind. On a CPU with bfloat16 arithmetic the activations are rounded to
bfloat16 for each product (`kernel_matmul`), which accumulates in
float32; elsewhere a product of many rows widens the kernel to float32
(once a call) and keeps the activations in float32. The biases, the
states, the gates' nonlinearities and every other elementwise step are
float32.
Such layers are for inference: they refuse `training=True`. One sentence
at a time, an LSTM step multiplies a few rows by kernels streamed from
memory; there a step of at most `MAX_STREAMED_ROWS` rows runs bilm's own
kernel (`bilm.ops.lowbit_matmul`), which reads the bfloat16 kernel at
memory speed on CPUs with AVX2 (measured on an AMD EPYC) and leaves the activations in float32 (TF's
bfloat16 product on CPUs without bfloat16 instructions is many times
slower than float32's).

`kernel_dtype="int8"` (and `matmul_dtype="int8"` wherever inference takes
it) stores those kernels in 8 bits with one float32 scale per output
column (`bilm.ops.scaled_kernel`): a quarter of float32's bytes. Its
products keep the activations, the accumulation and the result in
float32; products of few rows run bilm's kernel, larger ones a float32
matmul with the kernel widened once. It is for inference only, like
bfloat16 kernels.

Hardware with bfloat16 matmuls (CPUs with AVX512-BF16 or AMX, GPUs) runs
them faster than float32 ones; elsewhere they are slower and round more
often (docs/performance.md has measurements). The default, float32, is the
original recipe's arithmetic.
"""
import tensorflow as tf

from bilm.errors import UserError
from bilm.ops.placement import bfloat16_products_fast
from bilm.ops.scaled_kernel import ScaledKernel, dequantize

MATMUL_DTYPES = ("float32", "bfloat16")
# The dtypes an inference model may keep its large kernels in: training's
# matmul dtypes and int8 (per-column scales).
KERNEL_DTYPES = MATMUL_DTYPES + ("int8",)


def check_matmul_dtype(value, where="matmul_dtype"):
    """Returns `value` if it is one of `MATMUL_DTYPES`; otherwise a ValueError naming `where`."""
    if value not in MATMUL_DTYPES:
        raise UserError(f"{where} must be one of {', '.join(map(repr, MATMUL_DTYPES))}, got {value!r}.")
    return value


def check_kernel_dtype(value, where="matmul_dtype"):
    """Returns `value` if it is one of `KERNEL_DTYPES`; otherwise a UserError naming `where`."""
    if value not in KERNEL_DTYPES:
        raise UserError(f"{where} must be one of {', '.join(map(repr, KERNEL_DTYPES))}, got {value!r}.")
    return value


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

    A float32 kernel: a float32 matmul. A bfloat16 kernel (a layer built
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
        return tf.matmul(x, kernel)
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


# How far bfloat16 inference strays from float32, for weights initialised
# as bilm initialises them (`bilm.models.random_weights`): every token's
# vector of every layer within 3% of float32's (relative, Euclidean); 0.4-0.7%
# at the released sizes, up to 1.4% in tiny layers (bench_embed.py prints
# the deviations). The deviation is the rounding (2**-9) times how much the
# LSTMs amplify a perturbation along a sentence, so it depends on the
# weights: weights that amplify it more deviate more (the tests' large
# numpy-reference weights, up to 15%); a trained model's own decide.
BFLOAT16_INFERENCE_TOLERANCE = 0.03

# How far int8 inference (per-column scales, float32 activations) strays
# from float32 for weights initialised as bilm initialises them: each
# kernel value is off by up to half of its column's step (the column's
# largest magnitude / 254), and, as with bfloat16, the LSTMs carry that
# along the sentence (docs/performance.md has the released sizes' figures).
INT8_INFERENCE_TOLERANCE = 0.05
