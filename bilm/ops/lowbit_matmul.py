"""`x @ kernel` for float32 `x` and few rows, by bilm's own CPU kernel: kernels in 16 or 8 bits, and float32.

With one sentence at a time, each LSTM step multiplies a row or a few
rows by kernels that do not fit in cache: the step's time is the time to
read the kernels from memory, so a kernel stored in bfloat16 (half the
bytes of float32) or int8 with one float32 scale per output column (a
quarter) makes it faster, but only if the product runs at memory speed.
TensorFlow's own bfloat16 and int8 products do not on CPUs without
bfloat16 instructions, so `native/lowbit_matmul.cc` does it: its kernel
is compiled at first use (`load_lowbit_ops`, with the system's C++
compiler; `bilm.ops.native.build` caches the library, and
`bilm.ops.native.lowbit_ops` loads it). Where that cannot
be built, `lowbit_matmul` computes the same product with stock
TensorFlow ops (a float32 copy of the kernel, then a float32 matmul).

The same kernel takes float32 kernels where it was built with AVX2 and
FMA (`streams_float32`), and inference then takes every float32 product
to it, at any number of rows: the products of `bilm.ops.batch_invariant`
(the highway, the LSTM's input half, the token projection, the char
tables) and the LSTM recurrence (`streamed_rows_limit`). A row's sums are cut and added alike whatever the
number of rows (one fused multiply-add per term, in order), so a row's
product is the same bytes in any batch. Built with AVX-512, groups of
rows run from a tiled copy of the kernel with the accumulators in
registers (as fast as stock matmuls on the batches of
bench/bench_embed.py); with AVX2 alone each group of 8 rows streams the
kernel, which on an AVX2 CPU without AVX-512 still beat the stock product
at one row and at batches of 32 and 256 (docs/performance.md). Elsewhere
float32 products are stock ones whose rows do not depend on the batch
either (`bilm.ops.batch_invariant`): never a mix of the two, whose sums
are ordered differently.

The gradient reaches `x`, and a float32 kernel; a bfloat16 or int8 kernel
is for inference and gets none.
"""
import tensorflow as tf

from bilm.ops.matmul_dtype import kernel_matmul
from bilm.ops.native.lowbit_ops import (  # noqa: F401 (load_op_library_or_warn, bfloat16_dot_products: re-exported)
    bfloat16_dot_products,
    float32_kernel_matmul,
    load_lowbit_ops,
    load_op_library_or_warn,
    streams_float32,
)
from bilm.ops.placement import (  # noqa: F401 (stock_kernels: re-exported)
    bfloat16_products_fast,
    native_kernels_allowed,
    stock_kernels,
)
from bilm.ops.scaled_kernel import ScaledKernel

LOWBIT_KERNEL_DTYPES = (tf.bfloat16, tf.int8)
# Rows up to which `inference_kernel_matmul` takes bilm's kernel. It reads
# the kernel once per 8 rows, so it is bound by memory at a few rows and
# still ahead of float32 and of TensorFlow's bfloat16 at 32 rows on CPUs
# without bfloat16 instructions (bench/bench_lowbit_matmul.py); at bulk
# sizes, stock matmuls' blocking (and bfloat16 hardware, where there is
# some) win; not where bilm's kernel takes bfloat16 as dot products
# (`bfloat16_dot_products()`), which beat TensorFlow's bfloat16 matmul in
# bulk too (docs/performance.md) and take a bfloat16 kernel at any number of rows.
MAX_STREAMED_ROWS = 64
# The limits of a float32 kernel where `streams_float32()`, and of a bfloat16 one where
# `bfloat16_dot_products()`: any number of rows.
UNLIMITED_ROWS = 2**31 - 1


def streamed_rows_limit(kernel):
    """The most rows for which bilm's kernel is the faster product with
    `kernel` (a tensor, variable or `ScaledKernel`), or 0 where inference
    does not take that kernel to it: a float32 kernel (see the module's
    docstring); where `bilm.ops.placement.native_kernels_allowed()` is
    false (in `stock_kernels()`, under XLA, on a GPU); where the library
    could not be built."""
    if not native_kernels_allowed():
        return 0
    if is_lowbit(kernel):
        if load_lowbit_ops() is None:
            return 0
        return UNLIMITED_ROWS if not isinstance(kernel, ScaledKernel) and bfloat16_dot_products() else MAX_STREAMED_ROWS
    if tf.as_dtype(kernel.dtype) == tf.float32 and streams_float32():
        return UNLIMITED_ROWS
    return 0


def lowbit_matmul(x, kernel, scale=None):
    """`(x @ float32(kernel)) * scale`, accumulated in float32.

    Each kernel value is widened to float32 exactly (a bfloat16 value's 16
    bits are the high half of a float32; an int8 value is an integer) and
    multiplied with `x` as it is: unlike TensorFlow's bfloat16 matmul,
    `x` is not rounded to bfloat16 and neither is the result, so the
    only error beyond the kernel's own rounding is float32 accumulation's.
    Except on a CPU that multiplies bfloat16 (AVX512-BF16,
    `bfloat16_dot_products()`): there a bfloat16 kernel's columns, in whole
    tiles of 32, run as bfloat16 dot products, twice the terms an
    instruction, with `x` rounded to bfloat16 as TensorFlow's bfloat16
    matmul rounds it (each product exact, the sums float32).
    With int8, `(x @ kernel) * scale` equals `x @ (kernel * scale)` up to
    that accumulation.

    Args:
        x: float32 `(rows, n)`.
        kernel: bfloat16 or int8 `(n, m)` (tensor or variable).
        scale: float32 `(m,)`, a factor for each output column (an int8
            kernel's per-column quantization scales), or None for none.

    Returns:
        float32 `(rows, m)`.
    """
    dtype = tf.as_dtype(kernel.dtype)
    if dtype not in LOWBIT_KERNEL_DTYPES:
        raise ValueError(f"lowbit_matmul's kernel must be bfloat16 or int8. Received: kernel.dtype={dtype.name}")
    x = tf.convert_to_tensor(x, tf.float32)
    ops = load_lowbit_ops()
    if ops is None:
        product = tf.matmul(x, tf.cast(kernel, tf.float32))
        return product if scale is None else product * scale
    scale = tf.zeros([0]) if scale is None else tf.convert_to_tensor(scale, tf.float32)
    return ops.bilm_lowbit_matmul(x, kernel, scale)


def is_lowbit(kernel):
    """Whether `kernel` is one `lowbit_matmul` takes: bfloat16, or a `ScaledKernel` (int8)."""
    return isinstance(kernel, ScaledKernel) or tf.as_dtype(kernel.dtype) == tf.bfloat16


def streamed_kernel_matmul(x, kernel):
    """`x @ kernel` by bilm's kernel, for products of at most
    `streamed_rows_limit(kernel)` rows (a few for a low-bit kernel, more
    still giving the right result, only slower than a stock product; any
    number for a float32 one) and a kernel it takes here
    (`streamed_rows_limit(kernel) > 0`): bfloat16, a `ScaledKernel`, or
    float32 where `streams_float32()`."""
    if isinstance(kernel, ScaledKernel):
        return lowbit_matmul(x, kernel.values, kernel.scale)
    if tf.as_dtype(kernel.dtype) == tf.float32:
        return float32_kernel_matmul(x, kernel)
    return lowbit_matmul(x, kernel)


def inference_kernel_matmul(x, kernel):
    """An inference product (the LSTM's input half, the highway):
    `bilm.ops.matmul_dtype.kernel_matmul(x, kernel)`, except that up to
    `streamed_rows_limit(kernel)` rows run bilm's kernel (`x` not
    rounded but where `bfloat16_dot_products()`): a few rows of a low-bit kernel (one sentence at a time, at
    memory speed), any number of a float32 kernel where `streams_float32()` and of a bfloat16 one where
    `bfloat16_dot_products()`.
    Not inside an XLA-compiled function (the op has no XLA kernel).

    Args:
        x: float32 `(rows, n)`.
        kernel: float32 or bfloat16 `(n, m)`, or a `ScaledKernel`.

    Returns:
        float32 `(rows, m)`.
    """
    limit = streamed_rows_limit(kernel)
    if limit == 0:
        return kernel_matmul(x, kernel)
    if limit == UNLIMITED_ROWS:  # bilm's kernel at any number of rows (the product `kernel_matmul` runs for float32)
        return streamed_kernel_matmul(x, kernel)
    return tf.cond(tf.shape(x)[0] <= limit, lambda: streamed_kernel_matmul(x, kernel),
                   lambda: kernel_matmul(x, kernel))


def inference_products(kernel_dtype):
    """One line naming the products that inference with `kernel_dtype` kernels (`"float32"`, `"bfloat16"` or
    `"int8"`) runs here, on this CPU, by `inference_kernel_matmul`'s rules: what the benches print beside a
    figure, so that figures of different products are not read as one's."""
    if kernel_dtype == "float32":
        return ("bilm's float32 kernel at every row count" if streams_float32()
                else "TensorFlow's float32 matmul, each row summed alike at any number of rows")
    many = {"bfloat16": "TensorFlow's bfloat16 matmul (x rounded, the result rounded to bfloat16)"
                        if bfloat16_products_fast() else "a float32 matmul over the kernel widened once",
            "int8": "a float32 matmul over the kernel dequantized once"}[kernel_dtype]
    if not native_kernels_allowed() or load_lowbit_ops() is None:
        return many
    if kernel_dtype == "bfloat16" and bfloat16_dot_products():
        return "bilm's kernel as bfloat16 dot products (x rounded to bfloat16, float32 sums) at every row count"
    few = f"bilm's kernel, the {kernel_dtype} kernel widened to float32 (x as it is)"
    return f"up to {MAX_STREAMED_ROWS} rows a product: {few}; more rows: {many}"
