"""The training biLM's output layer in `keras.ops`, for every backend's array step: bilm-tf's sampled softmax
(training) and the full softmax (evaluation).

Both losses return one loss per row and are differentiated by the
backend's gradient (`bilm.backend.training_ops`). The sampled loss reads
only the `n_rows + num_sampled` rows it needs; a step that differentiates
the gathered rows themselves (`rows_given=True`) gets those rows'
gradients alone, and updates an 800k-row table row by row. The negatives
come from the backend's sampler (`log_uniform_candidates`), TensorFlow's
ids from the same seed. What differs from TensorFlow's
`bilm.ops.sampled_softmax`: with `matmul_dtype="bfloat16"` the `(n_rows, S)`
logits' matmul takes bfloat16 operands and gives a bfloat16 result, as
there, and the corrected biases are added to it in float32 (TensorFlow
multiplies them in as a bfloat16 column).
"""
from keras import ops

from bilm.backend import fast_layer_call
from bilm.errors import UserError
from bilm.ops.kernel_dtypes import check_matmul_dtype


def sampled_softmax_loss(weights, biases, inputs, labels, candidates, matmul_dtype="float32", rows_given=False):
    """Sampled softmax loss, as `tf.nn.sampled_softmax_loss` computes it.

    The true class competes with the sampled ids; every logit is corrected
    by `-log(expected_count)` and a sampled id equal to the row's label (an
    "accidental hit") is removed.

    Args:
        weights: `(n_vocab, dim)` softmax table; or, with `rows_given`, its
            `(n_rows + S, dim)` rows `weights[ids]` for
            `ids = concatenate([labels, sampled])`.
        biases: `(n_vocab,)`; or, with `rows_given`, `biases[ids]`
            `(n_rows + S,)` (not corrected).
        inputs: float `(n_rows, dim)`.
        labels: int `(n_rows,)`.
        candidates: `(sampled (S,), true_expected_count (n_rows,),
            sampled_expected_count (S,))`, e.g. from `log_uniform_candidates`.
        matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16 operands
            and result in the `(n_rows, S)` logits' matmul.
        rows_given: `weights` and `biases` are the gathered rows, so that a
            training step differentiates them alone (row-sparse updates).

    Returns:
        float `(n_rows,)`, the loss of each row.
    """
    sampled, true_expected, sampled_expected = candidates
    inputs = ops.convert_to_tensor(inputs)
    labels = ops.cast(labels, "int32")
    sampled = ops.cast(sampled, "int32")
    if rows_given:
        rows, row_biases = ops.convert_to_tensor(weights), ops.convert_to_tensor(biases)
        expected_rows = labels.shape[0] + sampled.shape[0]
        if rows.shape[0] != expected_rows or row_biases.shape[0] != expected_rows:
            raise UserError(f"rows_given needs the {expected_rows} rows of the labels then the sampled ids; "
                            f"got {rows.shape[0]} weight rows and {row_biases.shape[0]} biases.")
    else:
        # One gather for the true and the sampled rows.
        ids = ops.concatenate([labels, sampled])
        rows, row_biases = ops.take(weights, ids, axis=0), ops.take(biases, ids, axis=0)
    expected = ops.cast(ops.concatenate([true_expected, sampled_expected]), inputs.dtype)
    return sampled_softmax_loss_from_rows(inputs, rows, row_biases - ops.log(expected), labels, sampled,
                                          matmul_dtype)


def sampled_softmax_loss_from_rows(inputs, rows, row_biases, labels, sampled, matmul_dtype="float32"):
    """The sampled softmax loss from the gathered rows: cross entropy of the
    true logit against the sampled ones.

    Args:
        inputs: float `(n_rows, dim)`.
        rows: `(n_rows + S, dim)`: the rows of the labels, then those of the
            sampled ids (`weights[concatenate([labels, sampled])]`).
        row_biases: `(n_rows + S,)`, the same rows' biases already
            corrected by `-log(expected_count)` (a constant, so their
            gradient is the raw biases' gradient).
        labels: int `(n_rows,)`; sampled: int `(S,)` (to find the
            accidental hits).
        matmul_dtype: `"float32"` or `"bfloat16"` (operands and result of
            the `(n_rows, S)` logits' matmul).

    Returns:
        float `(n_rows,)`: `log(sum of exp over the true and the kept
        sampled logits) - true logit`, each row's logits less their maximum
        before the exponentials.
    """
    check_matmul_dtype(matmul_dtype)
    fast = fast_layer_call("sampled_softmax_from_rows")  # TensorFlow's: the same loss, its gradient by hand
    if fast is not None:
        return fast(inputs, rows, row_biases, labels, sampled, matmul_dtype)
    n = inputs.shape[0]
    true_rows, sampled_rows = rows[:n], rows[n:]
    true_logits = ops.sum(inputs * true_rows, axis=1) + row_biases[:n]
    if matmul_dtype == "bfloat16":
        sampled_logits = ops.matmul(ops.cast(inputs, "bfloat16"), ops.cast(ops.transpose(sampled_rows), "bfloat16"))
    else:
        sampled_logits = ops.matmul(inputs, ops.transpose(sampled_rows))
    sampled_logits = ops.cast(sampled_logits, true_logits.dtype) + row_biases[n:]
    # An accidental hit is removed: its exponential is zero (and its gradient too).
    hit = ops.equal(ops.expand_dims(labels, 1), ops.expand_dims(sampled, 0))
    sampled_logits = ops.where(hit, float("-inf"), sampled_logits)
    top = ops.stop_gradient(ops.maximum(ops.max(sampled_logits, axis=1), true_logits))
    total = ops.sum(ops.exp(sampled_logits - ops.expand_dims(top, 1)), axis=1) + ops.exp(true_logits - top)
    return ops.log(total) + top - true_logits


def full_softmax_loss(weights, biases, inputs, labels):
    """Cross entropy over the whole vocabulary.

    Args:
        weights: `(n_vocab, dim)`; biases: `(n_vocab,)`.
        inputs: float `(n_rows, dim)`; labels: int `(n_rows,)`.

    Returns:
        float `(n_rows,)`: `logsumexp(logits) - logits[label]` for
        `logits = inputs @ weights.T + biases`.
    """
    logits = ops.matmul(inputs, ops.transpose(weights)) + biases
    labels = ops.expand_dims(ops.cast(labels, "int32"), 1)
    return ops.logsumexp(logits, axis=1) - ops.take_along_axis(logits, labels, axis=1)[:, 0]
