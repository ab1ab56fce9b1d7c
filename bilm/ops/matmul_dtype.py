"""Matmuls with float32 operands, or (opt-in, for training) bfloat16 ones.

Training can run its largest matmuls (highway, the LSTMs' input half, the
sampled softmax, whose corrected biases ride in its matmul) with bfloat16
operands: `"matmul_dtype": "bfloat16"` in the options. Each such product
rounds its operands to bfloat16 (8 significant bits), accumulates in
float32 and rounds the result to bfloat16; the gradients of these matmuls
are bfloat16 matmuls too. Everything else stays float32: the variables and
the optimizer's slots, the LSTM recurrence and cell state, the losses. It
applies to training steps only; evaluation (held-out and `run_test.py`
perplexities) and prediction are float32.

Hardware with bfloat16 matmuls (CPUs with AVX512-BF16 or AMX, GPUs) runs
them faster than float32 ones; elsewhere they can be slower
(docs/performance.md has measurements). The default, float32, is the
original recipe's arithmetic.
"""
import tensorflow as tf

MATMUL_DTYPES = ("float32", "bfloat16")


def check_matmul_dtype(value, where="matmul_dtype"):
    """Returns `value` if it is one of `MATMUL_DTYPES`; otherwise a ValueError naming `where`."""
    if value not in MATMUL_DTYPES:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, MATMUL_DTYPES))}, got {value!r}.")
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
