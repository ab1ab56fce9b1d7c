"""The training biLM's output layer on JAX: sampled softmax (training) and full softmax.

A port of `bilm.ops.sampled_softmax` (TensorFlow) in pure JAX (`jax`,
`jax.numpy`, `jax.lax`). Both losses take the softmax table `weights`
`(n_vocab, dim)` and `biases` `(n_vocab,)` and return one loss per row;
they are plain JAX functions, differentiated by `jax.grad`, and run under
`jax.jit` (the sampler with `num_sampled` and `n_vocab` static). The
sampled loss reads only the `n_rows + num_sampled` rows it needs, so the
gradient of the table is zero elsewhere; a training step that
differentiates the gathered rows themselves
(`sampled_softmax_loss(..., rows_given=True)` or
`sampled_softmax_loss_from_rows`) gets those rows' gradients alone, and
updates an 800k-row table row by row.

The negatives are TensorFlow's: from the same seed (`bilm.ops.jax_random`,
TensorFlow's Philox stream in 32-bit integers) the sampler draws the same
ids in the same order, by TensorFlow's float64 inversion of the
distribution function done as a search in a table of its thresholds
(`log_uniform_draws`). What differs from the TensorFlow module:

- The expected counts are computed in float64 when JAX's x64 mode is on
  (`jax.config.jax_enable_x64`; this module never turns it on), else in
  float32, within 5e-7 relative of the float64 formula
  (`expected_counts`); they are returned as float32 either way, as
  TensorFlow returns them.
- `matmul_dtype="bfloat16"` rounds the operands of the `(n_rows, S)`
  logits' matmul to bfloat16 and accumulates in float32; the result stays
  float32 and the corrected biases are added to it in float32 (TensorFlow's
  version rounds the result to bfloat16 and multiplies the biases in as a
  bfloat16 column).
- Ids are int32 (JAX's default integers): vocabularies below 2^31 - 1 ids.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from bilm.errors import UserError
from bilm.ops import jax_random
from bilm.ops.kernel_dtypes import check_matmul_dtype

# Draws made per iteration of the unique sampler, and the block size of its
# numbered stream of draws, as on TensorFlow.
DRAW_BLOCK = 16384

# The largest vocabulary: ids and the sampler's sentinel `n_vocab` are int32.
MAX_VOCAB = 2 ** 31 - 2


def _count_dtype():
    """float64 where JAX's x64 mode is on, else float32: the dtype of the probabilities and counts."""
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def log_uniform_probabilities(ids, n_vocab):
    """P(id) of the log-uniform sampler: `log((id + 2) / (id + 1)) / log(n_vocab + 1)`.

    Float64 where JAX's x64 mode is on, else float32 (`log1p(1 / (id + 1))`
    in float32 times `1 / log1p(n_vocab)` rounded from float64: within
    about 3e-7 relative).
    """
    ids = jnp.asarray(ids).astype(_count_dtype())
    return jnp.log1p(1.0 / (ids + 1.0)) * (1.0 / math.log1p(n_vocab))


def log_uniform_draws(seed, size, n_vocab):
    """`size` independent log-uniform ids in `[0, n_vocab)`: TensorFlow's draws from `seed`
    (`bilm.ops.sampled_softmax.log_uniform_draws`), the same ids.

    TensorFlow inverts the distribution function in float64:
    `id = floor(exp(u log(n_vocab + 1))) - 1` for a float64 uniform
    `u = M / 2^52` (`M` a 52-bit integer of its Philox stream), clipped to
    `[0, n_vocab)`. Here `M` is the same integer (`bilm.ops.jax_random`,
    as two 32-bit words) and `id` is how many of the thresholds
    `inverse_thresholds(n_vocab)` it reaches: a binary search in 32-bit
    integers, with no float64 arithmetic.

    Args:
        seed: uint32 `(4,)` seed (`bilm.ops.jax_random`).
        size: how many ids (a Python int).
        n_vocab: a Python int in `[1, MAX_VOCAB]`.

    Returns:
        int32 `(size,)`.
    """
    high, low = jax_random.uniform_float64_mantissas(seed, size)
    thresholds_high, thresholds_low = (jnp.asarray(t) for t in inverse_thresholds(n_vocab))
    n = thresholds_high.shape[0]
    if n == 0:
        return jnp.zeros([size], jnp.int32)

    def halve(_, bounds):  # the count of thresholds at most M is in [first, past]
        first, past = bounds
        searching = first < past
        middle = jnp.minimum((first + past) // 2, n - 1)
        t_high, t_low = thresholds_high[middle], thresholds_low[middle]
        reached = (t_high < high) | ((t_high == high) & (t_low <= low))
        return jnp.where(searching & reached, middle + 1, first), jnp.where(searching & ~reached, middle, past)

    bounds = jnp.zeros([size], jnp.int32), jnp.full([size], n, jnp.int32)
    return lax.fori_loop(0, n.bit_length(), halve, bounds)[0]


@functools.lru_cache(maxsize=8)
def inverse_thresholds(n_vocab):
    """The 52-bit integers where TensorFlow's float64 inversion (`log_uniform_draws`) moves to the next id:
    entry `k` is the least `M` with `floor(exp(M 2^-52 log1p(n_vocab))) >= k + 2`, so that `id` is the number
    of entries at most `M`. `(high 20 bits int32 (n_vocab - 1,), low 32 bits uint32 (n_vocab - 1,))`,
    NumPy, computed with TensorFlow's float64 formula (a boundary could only move where NumPy's `exp`
    and TensorFlow's round one `M` of the 2^52 apart, about 1e-10 of the draws over all ids)."""
    scale = np.log1p(np.float64(n_vocab))
    m = np.arange(2, n_vocab + 1, dtype=np.float64)

    def reaches(mantissas):
        return np.floor(np.exp((mantissas.astype(np.float64) * 2.0 ** -52) * scale)) >= m

    mantissas = np.minimum(np.ceil(np.log(m) / scale * 2.0 ** 52), 2.0 ** 52 - 1).astype(np.int64)
    for _ in range(64):  # the estimate is within a few units of the threshold
        below = ~reaches(mantissas)
        if not below.any():
            break
        mantissas[below] += 1
    for _ in range(64):
        above = reaches(mantissas - 1) & (mantissas > 0)
        if not above.any():
            break
        mantissas[above] -= 1
    return (mantissas >> 32).astype(np.int32), (mantissas & 0xFFFFFFFF).astype(np.uint32)


def log_uniform_candidates(labels, num_sampled, n_vocab, seed, return_tries=False):
    """Draws `num_sampled` distinct negative ids shared by the whole batch.

    The sampler of `tf.random.log_uniform_candidate_sampler(unique=True)`
    and of `bilm.ops.sampled_softmax.log_uniform_candidates`, whose ids it
    draws from the same seed: log-uniform draws until `num_sampled` distinct
    ids have come up, the expected counts estimated from the number of
    draws it took. It keeps no random state: the ids are a pure function of
    `seed`. The log-uniform (Zipfian) sampler assumes ids sorted by
    descending frequency, as the vocabulary file is. Every shape is fixed
    (`jax.lax.while_loop` over blocks of draws): it runs under `jax.jit`
    with `num_sampled` and `n_vocab` static.

    Args:
        labels: int `(n_rows,)`, the true next-token ids.
        num_sampled: how many distinct ids to draw, a Python int at most
            `n_vocab`.
        n_vocab: ids are drawn from `[0, n_vocab)`, a Python int.
        seed: uint32 `(4,)` seed (`bilm.ops.jax_random`). Draw `i` of the
            stream is draw `i % DRAW_BLOCK` of `log_uniform_draws(
            jax_random.fold_in_int32(seed, i // DRAW_BLOCK), DRAW_BLOCK,
            n_vocab)`, as on TensorFlow.
        return_tries: also return the number of draws it took.

    Returns:
        `(sampled (num_sampled,) int32 in order of first appearance,
        true_expected_count (n_rows,) float32, sampled_expected_count
        (num_sampled,) float32)`, then `tries` (int32 scalar) if
        `return_tries`: the expected count of an id with probability `p`
        after `n` draws is `-expm1(n log1p(-p))` (`p n` when every draw was
        new), see `expected_counts`.
    """
    num_sampled, n_vocab = int(num_sampled), int(n_vocab)
    if num_sampled > n_vocab:
        raise UserError(
            f"n_negative_samples_batch ({num_sampled}) exceeds the vocabulary size ({n_vocab}); "
            "lower n_negative_samples_batch or set sample_softmax to false.")
    if not 1 <= n_vocab <= MAX_VOCAB:
        raise UserError(f"The vocabulary size must be between 1 and {MAX_VOCAB} on JAX, got {n_vocab}.")

    def body(carry):
        block, found, tries, sampled = carry
        draws = log_uniform_draws(jax_random.fold_in_int32(seed, block), DRAW_BLOCK, n_vocab)
        sampled, taken, last = _static_new_draws(draws, sampled, found, num_sampled, n_vocab)
        # The draw that brought the last id needed ends the sampling.
        tries = jnp.where(found + taken >= num_sampled, block * DRAW_BLOCK + last + 1, (block + 1) * DRAW_BLOCK)
        return block + 1, found + taken, tries, sampled

    zero = jnp.int32(0)
    _, _, tries, sampled = lax.while_loop(
        lambda carry: carry[1] < num_sampled, body, (zero, zero, zero, jnp.zeros([num_sampled], jnp.int32)))
    result = (sampled, expected_counts(labels, tries, num_sampled, n_vocab),
              expected_counts(sampled, tries, num_sampled, n_vocab))
    return result + (tries,) if return_tries else result


def _static_new_draws(draws, sampled, found, num_sampled, n_vocab):
    """`(sampled, taken, last)`: `sampled` `(num_sampled,)` with the ids of
    `draws` not among its first `found` written after them, in order of
    first appearance, until it is full; how many were written (`taken`);
    and the position in `draws` of the last one written (`DRAW_BLOCK - 1`
    if none). Every shape is fixed: one stable sort of the ids found so far
    followed by the draws tells each draw whether it is the first of its id
    (the ids found sort first among equals). An unfilled slot holds
    `n_vocab`, which no draw is."""
    n_draws = draws.shape[0]
    slots = jnp.arange(num_sampled, dtype=jnp.int32)
    # Slots not yet filled hold n_vocab, which no draw is.
    ids = jnp.concatenate([jnp.where(slots < found, sampled, jnp.int32(n_vocab)), draws])
    order = jnp.argsort(ids, stable=True)
    sorted_ids = ids[order]
    first = jnp.concatenate([jnp.ones([1], bool), sorted_ids[1:] != sorted_ids[:-1]])
    new_sorted = first & (order >= num_sampled)
    # Back to draw order: whether each draw brings a new id.
    new = jnp.zeros([num_sampled + n_draws], jnp.int32).at[order].set(new_sorted.astype(jnp.int32))[num_sampled:]
    slot = found + jnp.cumsum(new, dtype=jnp.int32) - new
    written = (new > 0) & (slot < num_sampled)
    # Draws not written go to one slot past the end, dropped.
    sampled = sampled.at[jnp.where(written, slot, num_sampled)].set(draws, mode="drop")
    taken = jnp.sum(written, dtype=jnp.int32)
    last = jnp.max(jnp.where(written, jnp.arange(n_draws, dtype=jnp.int32), -1))
    return sampled, taken, jnp.where(taken > 0, last, jnp.int32(n_draws - 1))


def expected_counts(ids, tries, num_sampled, n_vocab):
    """Expected number of times each id came up in `tries` unique-sampling
    draws, float32 (the estimate `tf.random.log_uniform_candidate_sampler`
    returns): `p tries` if `tries == num_sampled`, else
    `-expm1(tries log1p(-p))` for `p = log_uniform_probabilities(ids)`.

    Computed in float64 where JAX's x64 mode is on. Else in float32:
    `log1p`, `expm1` and the product each round to about 1e-7 relative,
    and `-expm1(x)` has a condition number below 1 for `x <= 0`, so the
    counts are within 5e-7 relative of the float64 formula (4e-7 at most,
    measured over vocabularies of 1k to 800k ids and 1 to 2^31 - 1 draws;
    the float64 counts rounded to float32 are within 6e-8). `tries` is
    exact in float32 below 2^24 draws, within 6e-8 relative above.
    """
    p = log_uniform_probabilities(ids, n_vocab)
    n = jnp.asarray(tries).astype(p.dtype)
    counts = jnp.where(jnp.asarray(tries) == num_sampled, p * n, -jnp.expm1(n * jnp.log1p(-p)))
    return counts.astype(jnp.float32)


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
            (float32 accumulation) in the `(n_rows, S)` logits' matmul.
        rows_given: `weights` and `biases` are the gathered rows, so that a
            training step differentiates them alone (row-sparse updates).

    Returns:
        float `(n_rows,)`, the loss of each row.
    """
    sampled, true_expected, sampled_expected = candidates
    inputs = jnp.asarray(inputs)
    labels = jnp.asarray(labels).astype(jnp.int32)
    sampled = jnp.asarray(sampled).astype(jnp.int32)
    if rows_given:
        rows, row_biases = jnp.asarray(weights), jnp.asarray(biases)
        expected_rows = labels.shape[0] + sampled.shape[0]
        if rows.shape[0] != expected_rows or row_biases.shape[0] != expected_rows:
            raise UserError(f"rows_given needs the {expected_rows} rows of the labels then the sampled ids; "
                            f"got {rows.shape[0]} weight rows and {row_biases.shape[0]} biases.")
    else:
        # One gather for the true and the sampled rows.
        ids = jnp.concatenate([labels, sampled])
        rows, row_biases = jnp.asarray(weights)[ids], jnp.asarray(biases)[ids]
    expected = jnp.concatenate([jnp.asarray(true_expected), jnp.asarray(sampled_expected)]).astype(inputs.dtype)
    return sampled_softmax_loss_from_rows(inputs, rows, row_biases - jnp.log(expected), labels, sampled,
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
        matmul_dtype: `"float32"` or `"bfloat16"` (operands of the
            `(n_rows, S)` logits' matmul; float32 accumulation and result).

    Returns:
        float `(n_rows,)`: `log(sum of exp over the true and the kept
        sampled logits) - true logit`, each row's logits less their maximum
        before the exponentials.
    """
    check_matmul_dtype(matmul_dtype)
    n = inputs.shape[0]
    true_rows, sampled_rows = rows[:n], rows[n:]
    true_logits = jnp.sum(inputs * true_rows, axis=1) + row_biases[:n]
    if matmul_dtype == "bfloat16":
        sampled_logits = jnp.matmul(inputs.astype(jnp.bfloat16), sampled_rows.astype(jnp.bfloat16).T,
                                    preferred_element_type=jnp.float32)
    else:
        sampled_logits = jnp.matmul(inputs, sampled_rows.T)
    sampled_logits = sampled_logits.astype(true_logits.dtype) + row_biases[n:]
    # An accidental hit is removed: its exponential is zero (and its gradient too).
    hit = jnp.asarray(labels)[:, None] == jnp.asarray(sampled)[None, :]
    sampled_logits = jnp.where(hit, -jnp.inf, sampled_logits)
    top = lax.stop_gradient(jnp.maximum(jnp.max(sampled_logits, axis=1), true_logits))
    total = jnp.sum(jnp.exp(sampled_logits - top[:, None]), axis=1) + jnp.exp(true_logits - top)
    return jnp.log(total) + top - true_logits


def full_softmax_loss(weights, biases, inputs, labels):
    """Cross entropy over the whole vocabulary.

    Args:
        weights: `(n_vocab, dim)`; biases: `(n_vocab,)`.
        inputs: float `(n_rows, dim)`; labels: int `(n_rows,)`.

    Returns:
        float `(n_rows,)`: `logsumexp(logits) - logits[label]` for
        `logits = inputs @ weights.T + biases`.
    """
    logits = jnp.matmul(inputs, jnp.asarray(weights).T) + biases
    labels = jnp.asarray(labels).astype(jnp.int32)
    return jax.nn.logsumexp(logits, axis=1) - jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
