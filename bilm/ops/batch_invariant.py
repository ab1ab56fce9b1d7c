"""Float32 products whose rows do not depend on the other rows: a sentence's vectors do not depend on its batch.

A float32 matmul's result for one row is a sum over the inner dimension,
and the order of that sum is the kernel's choice: TensorFlow's CPU matmul
(oneDNN) picks a different inner blocking for a single row (a vector
product) and, where both the inner and the outer dimension are large,
for many rows than for few. A row's result then depends on how many rows
share the call, and so a sentence's vectors on which sentences share its
batch, the batch size, a resumed run's first batch or a Beam shard.

`batch_invariant_matmul` takes the product to bilm's own kernel wherever
that takes float32 kernels (`bilm.ops.native.lowbit_ops.streams_float32`:
built with AVX2 and FMA), which sums each row alike whatever the number of
rows. Elsewhere it calls the stock matmul only in the shapes in which its
rows come out the same for any number of rows from 2 up: a single row is
padded to two, and where the inner dimension and the outer one both exceed
`INVARIANT_COLUMNS`, the product is taken in blocks of that many output
columns. Whether a CPU's matmul keeps that contract is a property of the
machine (an AVX2 CPU without AVX-512 did not); `tests/ops/test_batch_invariant.py`
checks the product at every size bilm's published models use; where it
holds, the vectors bilm writes are the same bytes however the sentences
are batched.
(The elementwise steps need widths that fill whole vector registers, as
every published model's do: TensorFlow's scalar code for the values left
over rounds a tanh or a sigmoid otherwise than its vector code.)

It is for inference, and for the char CNN's small table products
(`bilm.ops.char_convolutions`) in training too: training's large
products (`bilm.ops.matmul_dtype.matmul`) are unchanged. Under XLA, and on a GPU, where these shapes promise
nothing, the product is a plain matmul.
"""
import tensorflow as tf

from bilm.ops.native.lowbit_ops import float32_kernel_matmul, streams_float32
from bilm.ops.placement import compiling_with_xla, device_type

# The widest block of output columns whose rows oneDNN computes alike for any number of rows.
INVARIANT_COLUMNS = 512


def batch_invariant_matmul(x, kernel):
    """`x @ kernel`, each row computed as it would be among any other rows.

    Args:
        x: float32 `(rows, n)`.
        kernel: float32 `(n, m)` (tensor or variable).

    Returns:
        float32 `(rows, m)`; row i depends only on `x[i]` and `kernel`
        (on a CPU, outside XLA, where bilm's kernel or the stock matmul
        keeps the contract: the module's docstring).
    """
    if streams_float32():
        return float32_kernel_matmul(x, kernel)
    if compiling_with_xla() or device_type() != "CPU":
        return tf.matmul(x, kernel)
    rows = tf.shape(x)[0]
    # One row runs a vector product, whose sums are ordered otherwise: two rows, the second zeros.
    padded = tf.pad(x, [[0, tf.maximum(2 - rows, 0)], [0, 0]])
    n, m = kernel.shape
    # (A kernel of unknown shape, only a test's, is taken whole.)
    if n is not None and m is not None and n > INVARIANT_COLUMNS and m > INVARIANT_COLUMNS:
        product = tf.concat([tf.matmul(padded, kernel[:, j:j + INVARIANT_COLUMNS])
                             for j in range(0, m, INVARIANT_COLUMNS)], axis=1)
    else:
        product = tf.matmul(padded, kernel)
    return product[:rows]
