"""bilm-tf's log-uniform sampler, what every backend's version shares: the block size of its stream of draws,
the largest vocabulary, the check of a request, and the table of thresholds by which a 52-bit uniform draw
becomes an id exactly as TensorFlow's float64 inversion makes it (NumPy, computed once per vocabulary size).

Each backend's sampler (`bilm.backend.<name>.sampler`) draws TensorFlow's
ids from the same seed with these.
"""
import functools

import numpy as np

from bilm.errors import UserError

# Draws made per iteration of the unique sampler, and the block size of its
# numbered stream of draws, as on TensorFlow.
DRAW_BLOCK = 16384

# The largest vocabulary: ids and the sampler's sentinel `n_vocab` are int32.
MAX_VOCAB = 2 ** 31 - 2


def check_request(num_sampled, n_vocab):
    """Raises `UserError` unless `num_sampled` distinct ids can be drawn from `[0, n_vocab)`."""
    if num_sampled > n_vocab:
        raise UserError(
            f"n_negative_samples_batch ({num_sampled}) exceeds the vocabulary size ({n_vocab}); "
            "lower n_negative_samples_batch or set sample_softmax to false.")
    if not 1 <= n_vocab <= MAX_VOCAB:
        raise UserError(f"The vocabulary size must be between 1 and {MAX_VOCAB}, got {n_vocab}.")


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
