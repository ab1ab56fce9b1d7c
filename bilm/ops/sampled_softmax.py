"""The training biLM's output layer: sampled softmax (training) and full softmax.

Both take the softmax table `weights` `(n_vocab, dim)` and `biases`
`(n_vocab,)` and return one loss per row. The sampled loss reads only the
rows it needs with `tf.gather`, so the gradient of the table is a
`tf.IndexedSlices` of `n_rows + num_sampled` rows and a step costs the same
with a 10k or an 800k vocabulary.
"""
import tensorflow as tf

from bilm.errors import UserError
from bilm.ops import stateless_random
from bilm.ops.matmul_dtype import matmul
from bilm.ops.placement import compiling_with_xla

# Draws made per iteration of the unique sampler, and the block size of its
# numbered stream of draws.
DRAW_BLOCK = 16384


def log_uniform_probabilities(ids, n_vocab):
    """P(id) of the log-uniform sampler: `log((id + 2) / (id + 1)) / log(n_vocab + 1)`, float64."""
    ids = tf.cast(ids, tf.float64)
    return tf.math.log1p(1.0 / (ids + 1.0)) / tf.math.log1p(tf.cast(n_vocab, tf.float64))


def log_uniform_draws(seed, size, n_vocab):
    """`size` independent log-uniform ids in `[0, n_vocab)`, a pure function of `seed`.

    Args:
        seed: int `(2,)` stateless seed.

    Returns:
        int64 `(size,)`: `floor(exp(u log(n_vocab + 1))) - 1` for uniform `u`.
    """
    u = stateless_random.uniform([size], seed, tf.float64)
    ids = tf.cast(tf.floor(tf.exp(u * tf.math.log1p(tf.cast(n_vocab, tf.float64)))), tf.int64) - 1
    return tf.clip_by_value(ids, 0, n_vocab - 1)  # u * log(...) can round up to the top


def log_uniform_candidates(labels, num_sampled, n_vocab, seed):
    """Draws `num_sampled` distinct negative ids shared by the whole batch.

    The sampler of `tf.random.log_uniform_candidate_sampler(unique=True)`:
    log-uniform draws until `num_sampled` distinct ids have come up, the
    expected counts estimated from the number of draws it took. Unlike that
    op it keeps no random state: the ids are a pure function of `seed`, so
    training that passes a seed per step samples the same negatives after a
    restart. The log-uniform (Zipfian) sampler assumes ids sorted by
    descending frequency, as the vocabulary file is.

    Args:
        labels: int `(n_rows,)`, the true next-token ids.
        num_sampled: how many distinct ids to draw (at most `n_vocab`).
        n_vocab: ids are drawn from `[0, n_vocab)`.
        seed: int `(2,)` stateless seed. Draw `i` of the stream is draw
            `i % DRAW_BLOCK` of `log_uniform_draws(fold_in(seed, i // DRAW_BLOCK))`
            (the block number an int32). Compiled with XLA the sampler
            draws the same ids: `bilm.ops.stateless_random`'s numbers, and
            shapes that do not depend on them (`_static_new_draws`).

    Returns:
        `(sampled (num_sampled,) int64 in order of first appearance,
        true_expected_count (n_rows,) float32, sampled_expected_count
        (num_sampled,) float32)`: the expected count of an id with
        probability `p` after `n` draws is `-expm1(n log1p(-p))` (`p n`
        when every draw was new).
    """
    if num_sampled > n_vocab:
        raise UserError(
            f"n_negative_samples_batch ({num_sampled}) exceeds the vocabulary size ({n_vocab}); "
            "lower n_negative_samples_batch or set sample_softmax to false.")
    seed = tf.cast(seed, tf.int64)
    new_draws = _static_new_draws if compiling_with_xla() else _new_draws

    def body(block, found, tries, sampled):
        block_seed = stateless_random.fold_in(seed, tf.cast(block, tf.int32))
        draws = log_uniform_draws(block_seed, DRAW_BLOCK, n_vocab)
        sampled, taken, last = new_draws(draws, sampled, found, num_sampled, n_vocab)
        # The draw that brought the last id needed ends the sampling.
        tries = tf.where(found + taken >= num_sampled, block * DRAW_BLOCK + last + 1, (block + 1) * DRAW_BLOCK)
        return block + 1, found + taken, tries, sampled

    zero = tf.constant(0, tf.int64)
    _, _, tries, sampled = tf.while_loop(
        lambda block, found, *_: found < num_sampled, body,
        (zero, zero, zero, tf.zeros([num_sampled], tf.int64)))
    labels = tf.cast(labels, tf.int64)
    return (sampled, expected_counts(labels, tries, num_sampled, n_vocab),
            expected_counts(sampled, tries, num_sampled, n_vocab))


def _new_draws(draws, sampled, found, num_sampled, n_vocab):
    """`(sampled, taken, last)`: `sampled` `(num_sampled,)` with the ids of
    `draws` not among its first `found` written after them, in order of
    first appearance, until it is full; how many were written (`taken`);
    and the position in `draws` of the last one written (`DRAW_BLOCK - 1`
    if none)."""
    positions = tf.range(tf.size(draws, out_type=tf.int64), dtype=tf.int64)
    distinct, which = tf.unique(draws)  # in order of first appearance
    first = tf.math.unsorted_segment_min(positions, which, tf.shape(distinct)[0])
    # An id is new unless it joins one already found (indices below
    # `found`); no table of the vocabulary's size is needed.
    _, joined = tf.unique(tf.concat([sampled[:found], distinct], 0), out_idx=tf.int64)
    new = joined[found:] >= found
    new_ids, new_first = tf.boolean_mask(distinct, new), tf.boolean_mask(first, new)
    take = tf.minimum(tf.size(new_ids, out_type=tf.int64), num_sampled - found)
    sampled = tf.tensor_scatter_nd_update(sampled, (found + tf.range(take))[:, tf.newaxis], new_ids[:take])
    last = tf.gather(tf.concat([new_first, [DRAW_BLOCK - 1]], 0), tf.maximum(take - 1, 0))
    return sampled, take, last


def _static_new_draws(draws, sampled, found, num_sampled, n_vocab):
    """`_new_draws` with every shape fixed, for XLA: one stable sort of the
    ids found so far followed by the draws tells each draw whether it is
    the first of its id (the ids found sort first among equals)."""
    n_draws = draws.shape[0]
    slots = tf.range(num_sampled, dtype=tf.int64)
    # Slots not yet filled hold n_vocab, which no draw is.
    ids = tf.concat([tf.where(slots < found, sampled, n_vocab), draws], 0)
    order = tf.argsort(ids, stable=True)
    sorted_ids = tf.gather(ids, order)
    first = tf.concat([[True], sorted_ids[1:] != sorted_ids[:-1]], 0)
    new_sorted = tf.logical_and(first, order >= num_sampled)
    # Back to draw order: whether each draw brings a new id.
    new = tf.scatter_nd(order[:, tf.newaxis], tf.cast(new_sorted, tf.int64), [num_sampled + n_draws])[num_sampled:]
    slot = found + tf.cumsum(new, exclusive=True)
    written = tf.logical_and(new > 0, slot < num_sampled)
    # Draws not written go to one slot past the end, cut off after.
    target = tf.where(written, slot, num_sampled)
    sampled = tf.tensor_scatter_nd_update(tf.concat([sampled, [0]], 0), target[:, tf.newaxis], draws)[:num_sampled]
    taken = tf.reduce_sum(tf.cast(written, tf.int64))
    positions = tf.range(n_draws, dtype=tf.int64)
    last = tf.reduce_max(tf.where(written, positions, -1))
    return sampled, taken, tf.where(taken > 0, last, n_draws - 1)


def expected_counts(ids, tries, num_sampled, n_vocab):
    """Expected number of times each id came up in `tries` unique-sampling
    draws, float32 (the estimate `tf.random.log_uniform_candidate_sampler`
    returns)."""
    p = log_uniform_probabilities(ids, n_vocab)
    tries = tf.cast(tries, tf.float64)
    counts = tf.where(tf.equal(tries, float(num_sampled)), p * tries,
                      -tf.math.expm1(tries * tf.math.log1p(-p)))
    return tf.cast(counts, tf.float32)


def sampled_softmax_loss(weights, biases, inputs, labels, candidates, matmul_dtype="float32"):
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
        matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16 operands in
            the `(n_rows, S)` logits' matmul and its gradients (see
            `bilm.ops.matmul_dtype`).

    Returns:
        float `(n_rows,)`, the loss of each row.
    """
    sampled, true_expected, sampled_expected = candidates
    inputs = tf.convert_to_tensor(inputs)
    labels = tf.cast(labels, tf.int64)
    sampled = tf.cast(sampled, tf.int64)
    # One gather for the true and the sampled rows: one IndexedSlices gradient.
    ids = tf.concat([labels, sampled], axis=0)
    expected = tf.cast(tf.concat([true_expected, sampled_expected], axis=0), inputs.dtype)
    row_biases = tf.gather(biases, ids) - tf.math.log(expected)
    return sampled_loss_from_rows(inputs, tf.gather(weights, ids), row_biases, labels, sampled, matmul_dtype)


def sampled_loss_from_rows(inputs, rows, row_biases, labels, sampled, matmul_dtype="float32"):
    """Cross entropy of the true logit against the sampled ones, by hand.

    `rows` `(n + S, dim)` and `row_biases` `(n + S,)` (corrected) hold the
    true rows then the sampled ones. The bias rides in the matmul as an
    extra column (so its gradient does too). The `(n, S)` logits make one
    compiled pass for their maximum and one for their exponentials, kept
    for the gradient; the gradient's row scale `d_loss / total` multiplies
    the small operands and results of its two matmuls rather than the
    exponentials. The three `(n, S)` matmuls take operands of `matmul_dtype`.
    """

    @tf.custom_gradient
    def loss_and_gradient(inputs, rows, row_biases):
        n = tf.shape(inputs)[0]
        true_rows, sampled_rows = rows[:n], rows[n:]
        true_logits = tf.reduce_sum(inputs * true_rows, axis=1) + row_biases[:n]
        augmented = tf.concat([inputs, tf.ones([n, 1], inputs.dtype)], axis=1)
        sampled_logits = matmul(augmented, tf.concat([sampled_rows, row_biases[n:, tf.newaxis]], axis=1),
                                matmul_dtype, transpose_b=True)
        sampled_exps, true_exps, total, top = _exponentials(sampled_logits, true_logits, labels, sampled)
        loss = tf.math.log(total) + top - true_logits

        def grad(d_loss):
            scale = d_loss / total
            # d_sampled_logits = scale * sampled_exps (zero at the hits), by rows.
            d_true_logits = true_exps * scale - d_loss
            d_inputs = (scale[:, tf.newaxis] * matmul(sampled_exps, sampled_rows, matmul_dtype)
                        + d_true_logits[:, tf.newaxis] * true_rows)
            d_sampled = matmul(sampled_exps, scale[:, tf.newaxis] * augmented, matmul_dtype,
                               transpose_a=True)  # (S, dim + 1)
            d_rows = tf.concat([d_true_logits[:, tf.newaxis] * inputs, d_sampled[:, :-1]], axis=0)
            d_row_biases = tf.concat([d_true_logits, d_sampled[:, -1]], axis=0)
            return d_inputs, d_rows, d_row_biases

        return loss, grad

    return loss_and_gradient(inputs, rows, row_biases)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _exponentials(sampled_logits, true_logits, labels, sampled):
    """`(sampled_exps (n, S), true_exps (n,), total (n,), top (n,))`: each
    row's logits less its largest, exponentiated and summed. A sampled id
    equal to the row's label (an accidental hit) is removed: its
    exponential is zero. Under XLA the comparison, the maximum and the
    exponentials fuse into two passes over the logits, instead of a
    scatter's copy and four passes."""
    hit = tf.equal(labels[:, tf.newaxis], sampled[tf.newaxis, :])
    sampled_logits = tf.where(hit, tf.constant(-float("inf"), sampled_logits.dtype), sampled_logits)
    top = tf.maximum(tf.reduce_max(sampled_logits, axis=1), true_logits)
    sampled_exps = tf.exp(sampled_logits - top[:, tf.newaxis])
    true_exps = tf.exp(true_logits - top)
    return sampled_exps, true_exps, tf.reduce_sum(sampled_exps, axis=1) + true_exps, top


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
