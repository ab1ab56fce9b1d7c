"""bilm-tf's log-uniform sampler on JAX: TensorFlow's negatives from the same seed, under `jax.jit`.

From the same seed (`bilm.backend.jax.random`, TensorFlow's Philox stream in
32-bit integers) the sampler draws the same ids in the same order as
`bilm.ops.sampled_softmax` does on TensorFlow, by TensorFlow's float64
inversion of the distribution function done as a search in a table of its
thresholds (`bilm.backend.log_uniform.inverse_thresholds`). Every shape is
fixed, so that it runs inside a compiled step. The expected counts are
computed in float64 when JAX's x64 mode is on
(`jax.config.jax_enable_x64`; this module never turns it on), else in
float32, within 5e-7 relative of the float64 formula (`expected_counts`);
they are returned as float32 either way, as TensorFlow returns them. Ids
are int32 (JAX's default integers).
"""
import math

import jax
import jax.numpy as jnp
from jax import lax

from bilm.backend.jax import random as jax_random
from bilm.backend.log_uniform import DRAW_BLOCK, check_request, inverse_thresholds


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
    `[0, n_vocab)`. Here `M` is the same integer (`bilm.backend.jax.random`,
    as two 32-bit words) and `id` is how many of the thresholds
    `inverse_thresholds(n_vocab)` it reaches: a binary search in 32-bit
    integers, with no float64 arithmetic.

    Args:
        seed: uint32 `(4,)` seed (`bilm.backend.jax.random`).
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
        seed: uint32 `(4,)` seed (`bilm.backend.jax.random`). Draw `i` of the
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
    check_request(num_sampled, n_vocab)

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
