"""bilm-tf's log-uniform sampler on PyTorch: TensorFlow's negatives from the same seed, run eagerly.

The same ids, in the same order, as `bilm.ops.sampled_softmax` (TensorFlow)
and `bilm.backend.jax.sampler` draw from one seed: each 52-bit uniform draw
of TensorFlow's Philox stream (`bilm.backend.torch.random`) becomes the number
of thresholds (`bilm.backend.log_uniform.inverse_thresholds`) it reaches, a
`torch.searchsorted` in int64. Shapes may vary (PyTorch runs eagerly), so
the unique sampling takes a block of draws at a time until enough distinct
ids have come up. The expected counts are computed in float64 and returned
as float32, as TensorFlow returns them. Ids are int64 (PyTorch's index type).
"""
import functools
import math

import torch

from bilm.backend.log_uniform import DRAW_BLOCK, check_request, inverse_thresholds
from bilm.backend.torch import random as torch_random


@functools.lru_cache(maxsize=8)
def _thresholds(n_vocab, device):
    high, low = inverse_thresholds(n_vocab)
    return (torch.as_tensor(high.astype("int64"), device=device) << 32) | torch.as_tensor(low.astype("int64"),
                                                                                           device=device)


def log_uniform_probabilities(ids, n_vocab):
    """P(id) of the log-uniform sampler, float64: `log((id + 2) / (id + 1)) / log(n_vocab + 1)`."""
    ids = torch.as_tensor(ids).to(torch.float64)
    return torch.log1p(1.0 / (ids + 1.0)) * (1.0 / math.log1p(n_vocab))


def log_uniform_draws(seed, size, n_vocab):
    """`size` independent log-uniform ids in `[0, n_vocab)`, TensorFlow's from `seed` (int64 `(4,)` words of
    `bilm.backend.torch.random`): int64 `(size,)`."""
    high, low = torch_random.uniform_float64_mantissas(seed, size)
    return torch.searchsorted(_thresholds(n_vocab, seed.device), (high << 32) | low, right=True)


def log_uniform_candidates(labels, num_sampled, n_vocab, seed):
    """Draws `num_sampled` distinct negative ids shared by the whole batch, as
    `tf.random.log_uniform_candidate_sampler(unique=True)` draws them from the same seed.

    Args:
        labels: int `(n_rows,)`, the true next-token ids.
        num_sampled, n_vocab: Python ints, `num_sampled <= n_vocab`.
        seed: int64 `(4,)` words (`bilm.backend.torch.random`). Draw `i` of the
            stream is draw `i % DRAW_BLOCK` of `log_uniform_draws(
            fold_in_int32(seed, i // DRAW_BLOCK), DRAW_BLOCK, n_vocab)`.

    Returns:
        `(sampled (num_sampled,) int64 in order of first appearance,
        true_expected_count (n_rows,) float32, sampled_expected_count
        (num_sampled,) float32)`.
    """
    num_sampled, n_vocab = int(num_sampled), int(n_vocab)
    check_request(num_sampled, n_vocab)
    sampled = torch.zeros([0], dtype=torch.int64, device=seed.device)
    block, tries = 0, 0
    while len(sampled) < num_sampled:
        draws = log_uniform_draws(torch_random.fold_in_int32(seed, block), DRAW_BLOCK, n_vocab)
        positions = _first_new_positions(draws, sampled)[:num_sampled - len(sampled)]
        sampled = torch.cat([sampled, draws[positions]])
        # The draw that brought the last id needed ends the sampling.
        tries = (block * DRAW_BLOCK + int(positions[-1]) + 1 if len(sampled) == num_sampled
                 else (block + 1) * DRAW_BLOCK)
        block += 1
    return (sampled, expected_counts(labels, tries, num_sampled, n_vocab),
            expected_counts(sampled, tries, num_sampled, n_vocab))


def _first_new_positions(draws, sampled):
    """The positions in `draws` of the first draw of each id not in `sampled`, ascending (int64)."""
    ids, inverse = torch.unique(draws, return_inverse=True)
    order = torch.arange(len(draws), device=draws.device)
    first = torch.full((len(ids),), len(draws), dtype=torch.int64, device=draws.device)
    first = first.scatter_reduce(0, inverse, order, reduce="amin")
    return torch.sort(first[~torch.isin(ids, sampled)]).values


def expected_counts(ids, tries, num_sampled, n_vocab):
    """Expected number of times each id came up in `tries` unique-sampling draws, float32: `p tries` if
    `tries == num_sampled`, else `-expm1(tries log1p(-p))` (float64 before the rounding)."""
    p = log_uniform_probabilities(ids, n_vocab)
    counts = p * tries if tries == num_sampled else -torch.expm1(tries * torch.log1p(-p))
    return counts.to(torch.float32)
