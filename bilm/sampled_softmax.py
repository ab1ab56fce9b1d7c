"""The training biLM's output layer: sampled softmax (training) and full softmax.

Both take the softmax table `weights` `(n_vocab, dim)` and `biases`
`(n_vocab,)` and return one loss per row. The sampled loss reads only the
rows it needs with `tf.gather`, so the gradient of the table is a
`tf.IndexedSlices` of `n_rows + num_sampled` rows and a step costs the same
with a 10k or an 800k vocabulary.
"""
import tensorflow as tf


def log_uniform_candidates(labels, num_sampled, n_vocab, seed=None):
    """Draws `num_sampled` distinct negative ids shared by the whole batch.

    The log-uniform (Zipfian) sampler assumes ids sorted by descending
    frequency, as the vocabulary file is.

    Args:
        labels: int `(n_rows,)`, the true next-token ids.
        num_sampled: how many distinct ids to draw (at most `n_vocab`).
        n_vocab: ids are drawn from `[0, n_vocab)`.

    Returns:
        `(sampled (num_sampled,) int64, true_expected_count (n_rows,),
        sampled_expected_count (num_sampled,))`, as
        `tf.random.log_uniform_candidate_sampler` gives them.
    """
    if num_sampled > n_vocab:
        raise ValueError(
            f"n_negative_samples_batch ({num_sampled}) exceeds the vocabulary size ({n_vocab}); "
            "lower n_negative_samples_batch or set sample_softmax to false.")
    sampled, true_expected, sampled_expected = tf.random.log_uniform_candidate_sampler(
        true_classes=tf.cast(labels, tf.int64)[:, tf.newaxis], num_true=1,
        num_sampled=num_sampled, unique=True, range_max=n_vocab, seed=seed)
    return sampled, true_expected[:, 0], sampled_expected


def sampled_softmax_loss(weights, biases, inputs, labels, candidates):
    """Sampled softmax loss, as `tf.nn.sampled_softmax_loss` computes it.

    The true class competes with the sampled ids; every logit is corrected
    by `-log(expected_count)` and a sampled id equal to the row's label (an
    "accidental hit") is removed.

    Args:
        weights: `(n_vocab, dim)` softmax table (a variable or tensor).
        biases: `(n_vocab,)`.
        inputs: float `(n_rows, dim)`.
        labels: int `(n_rows,)`.
        candidates: `(sampled (S,), true_expected_count (n_rows,),
            sampled_expected_count (S,))`, e.g. from `log_uniform_candidates`.

    Returns:
        float `(n_rows,)`, the loss of each row.
    """
    sampled, true_expected, sampled_expected = candidates
    inputs = tf.convert_to_tensor(inputs)
    labels = tf.cast(labels, tf.int64)
    sampled = tf.cast(sampled, tf.int64)
    n_rows = tf.shape(labels)[0]
    # One gather for the true and the sampled rows: one IndexedSlices gradient.
    ids = tf.concat([labels, sampled], axis=0)
    rows = tf.gather(weights, ids)
    row_biases = tf.gather(biases, ids)
    true_w, sampled_w = rows[:n_rows], rows[n_rows:]
    true_b, sampled_b = row_biases[:n_rows], row_biases[n_rows:]

    true_logits = tf.reduce_sum(inputs * true_w, axis=1) + true_b
    true_logits -= tf.math.log(tf.cast(true_expected, inputs.dtype))
    sampled_logits = tf.matmul(inputs, sampled_w, transpose_b=True) + sampled_b
    sampled_logits -= tf.math.log(tf.cast(sampled_expected, inputs.dtype))
    hits = tf.equal(labels[:, tf.newaxis], sampled[tf.newaxis, :])
    sampled_logits = tf.where(hits, tf.fill(tf.shape(sampled_logits), inputs.dtype.min), sampled_logits)

    logits = tf.concat([true_logits[:, tf.newaxis], sampled_logits], axis=1)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.zeros([n_rows], tf.int32), logits=logits)


def full_softmax_loss(weights, biases, inputs, labels):
    """Cross entropy over the whole vocabulary.

    Args:
        weights: `(n_vocab, dim)`; biases: `(n_vocab,)`.
        inputs: float `(n_rows, dim)`; labels: int `(n_rows,)`.

    Returns:
        float `(n_rows,)`.
    """
    logits = tf.matmul(inputs, weights, transpose_b=True) + biases
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32), logits=logits)
