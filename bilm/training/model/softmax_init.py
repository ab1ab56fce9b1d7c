"""Where a new softmax starts when a trained biLM is adapted to a new vocabulary.

The softmax turns the top layer's output `h` (width P) at each position
into a distribution over the vocabulary, `p(w | h)` proportional to
`exp(h . W[w] + b[w])`. A model adapted from published weights has a
trained biLM but a softmax over the new vocabulary that nobody trained. The
initialisations (`SOFTMAX_INITS`):

- `"random"`: as a run from scratch, `W` N(0, 1/sqrt(P)) and `b` zeros.
- `"encoding"`: `W[w] = s * x_w`, with `x_w` the model's context-free
  encoding of the word (layer 0: char CNN, highway, projection; also width
  P), and `b` zeros.
- `"fit"`: the softmax that a Gaussian model of the top layer implies
  (linear discriminant analysis). On a sample of the training text, each
  word's mean output `m_w` and the covariance `S` of the outputs around
  their word's mean give `p(w | h)` proportional to `N(h; m_w, S)`, that
  is `W[w] = s * S^-1 m_w` and `b[w] = -s * m_w . S^-1 m_w / 2`. A word
  seen a few times has its mean pulled towards a linear map of its
  encoding (fitted on the words of the sample), and a word not in the
  sample takes that map's value, so every row still depends on its word.
  `S` is shrunk towards its mean variance (`SHRINKAGE`) and holds the
  variance that training adds to the outputs it sees: its dropout's, and
  `DRIFT_VARIANCE` for the biLM's own steps, so that the start is not
  sharper than the first steps allow.

In both fitted ones `s` is the one number that minimises the full-softmax
loss on positions of the sample kept apart from the rest of the fit, with
training's perturbations (dropout, drift) applied to them.

Neither puts the words' frequencies into the bias, although that start
has a far lower loss: with it, the training that follows went slower
(docs/adaptation.md measures both). `initialize_softmax(...,
frequency_bias=True)` adds `log p(w)`: the sample's target counts, the
words it does not hold sharing the Good-Turing estimate of unseen mass (the
share of targets seen once) in proportion to `1 / rank` (the vocabulary is
sorted by frequency).

The fit itself (`fit_softmax`) is NumPy over what a `TrainedBiLM` reads
(the top layer's outputs on the start of the text, the words' encodings),
whichever backend computes them (the array step's, `bilm.training.arrays.softmax_init`).
"""
import math
from typing import Protocol

import numpy as np

from bilm.errors import UserError
from bilm.training.data.shards import count_positions

SOFTMAX_INITS = ("fit", "encoding", "random")
DEFAULT_SOFTMAX_INIT = "fit"
# Positions (both directions) of the training text the fit reads, and the
# share of them kept apart to fit the scale.
DEFAULT_SAMPLE_POSITIONS = 100_000
SCALE_SHARE = 0.2
# How far the covariance of "fit" is pulled towards its mean variance.
SHRINKAGE = 0.3
# The variance per unit that adapting adds to the top layer's outputs: in
# bench/bench_adapt.py (outputs of about 0.9 root mean square) they moved by
# about 0.4 (root mean square) over the run. Without it, a model whose
# outputs barely vary (an untrained one) gets a softmax so sharp that its
# first step throws it off.
DRIFT_VARIANCE = 0.16
# Logits (positions x words) the scale fit keeps (float32), and computes on at once (float64).
_LOGITS_BUDGET = 2 ** 24
_ENCODING_CHUNK = 4096


def check_softmax_init(method):
    if method not in SOFTMAX_INITS:
        raise UserError(f"softmax_init must be one of {SOFTMAX_INITS}. Received: softmax_init={method!r}")
    return method


class TrainedBiLM(Protocol):
    """What the fit reads of a biLM, on whichever backend it runs (`fit_softmax`'s contract).

    Attributes:
        settings: its `TrainingSettings` (`n_tokens_vocab`, `dropout`,
            `batch_size`, `unroll_steps`).
    """

    settings: object

    def top_outputs(self, data, n_positions):
        """The top layer's outputs `(n, P)` float32 and their targets `(n,)` int64 over the start of the
        stream `data` (both directions, LSTM states carried from zeros, no dropout), in stream order, at least
        `n_positions` of them where the stream holds them."""

    def encode_words(self, char_ids):
        """The layer-0 encodings `(n, P)` float32 of `n` words given as their character ids `(n, max_chars)`
        (training form)."""


def fit_softmax(bilm, data, method, n_positions=DEFAULT_SAMPLE_POSITIONS, frequency_bias=False):
    """The new softmax `method` gives (see the module docstring), computed in NumPy from what `bilm` reads.

    Args:
        bilm: a `TrainedBiLM` (the array step's, `bilm.training.arrays.softmax_init`).
        data, method, n_positions, frequency_bias: as in `initialize_softmax`.

    Returns:
        `(softmax, report)`. `softmax`: the arrays to set, `"W"` float32
        `(n_tokens_vocab, P)` and `"b"` float32 `(n_tokens_vocab,)`; only
        `"b"` for `"random"` with `frequency_bias`, nothing for `"random"`
        without (the random start stays). `report`: `method`, and for the
        fitted ones `scale` (s), `positions` read, `sample_perplexity` (the
        full-softmax perplexity of the new softmax on the positions kept
        apart, without perturbations), `frequency_perplexity` (the same with
        the words' log frequencies added to its bias: what the fit knows
        beyond them) and, for comparison, `unigram_perplexity` (the words'
        frequencies alone) there.

    Raises:
        UserError: an unknown `method`, or a vocabulary of another size than the softmax's.
    """
    check_softmax_init(method)
    if method == "random" and not frequency_bias:
        return {}, {"method": method}
    vocab = data.vocab
    if vocab.size != bilm.settings.n_tokens_vocab:
        raise UserError(f"The data's vocabulary has {vocab.size} words but the softmax has "
                        f"{bilm.settings.n_tokens_vocab} rows (n_tokens_vocab).")
    outputs, targets = bilm.top_outputs(data, min(n_positions, positions_in_one_pass(data, n_positions)))
    n_scale = max(1, int(len(targets) * SCALE_SHARE))
    (fit_outputs, fit_targets), (scale_outputs, scale_targets) = (
        (outputs[:-n_scale], targets[:-n_scale]), (outputs[-n_scale:], targets[-n_scale:]))
    frequencies = log_frequencies(np.bincount(fit_targets, minlength=vocab.size))
    bias = frequencies if frequency_bias else np.zeros(vocab.size, np.float32)
    if method == "random":
        return {"b": bias}, {"method": method, "positions": len(targets)}
    encode = _encoder(bilm, vocab.word_char_ids, outputs.shape[1])
    dropout = bilm.settings.dropout
    if method == "encoding":
        weights, offsets = encode(np.arange(vocab.size)), np.zeros(vocab.size, np.float32)
    else:
        weights, offsets = _gaussian_softmax(fit_outputs, fit_targets, encode, vocab.size, dropout)
    scale, _ = fit_scale(_perturbed(scale_outputs, dropout), scale_targets, weights, offsets, bias)
    _, perplexity = fit_scale(scale_outputs, scale_targets, weights, offsets, bias, scale=scale)
    _, with_frequencies = fit_scale(scale_outputs, scale_targets, weights, offsets, frequencies, scale=scale)
    softmax = {"W": (scale * weights).astype(np.float32), "b": (scale * offsets + bias).astype(np.float32)}
    return softmax, {"method": method, "scale": scale, "positions": len(targets), "sample_perplexity": perplexity,
                     "frequency_perplexity": with_frequencies,
                     "unigram_perplexity": float(np.exp(-np.mean(frequencies[scale_targets])))}


def _perturbed(outputs, dropout, seed=0):
    """`outputs` as training's steps see them: dropped out at `dropout` (the others scaled by
    1 / (1 - dropout)), plus Gaussian noise of `DRIFT_VARIANCE`."""
    rng = np.random.default_rng(seed)
    if dropout:
        outputs = outputs * (rng.random(outputs.shape) >= dropout) / (1 - dropout)
    return (outputs + rng.normal(0.0, np.sqrt(DRIFT_VARIANCE), outputs.shape)).astype(np.float32)


def positions_in_one_pass(data, limit):
    """Target positions of one pass over the training stream `data`'s text,
    both directions of a `BidirectionalLMDataset`, counted up to `limit`."""
    directions = 2 if hasattr(data, "backward") else 1  # both read the same shards
    return directions * count_positions(getattr(data, "forward", data).shards, -(-limit // directions))


def log_frequencies(counts):
    """`log p(w)` `(V,)` from target counts `(V,)`: relative counts, and for the words with none the
    Good-Turing unseen mass (words seen once / all targets) shared in proportion to 1 / (id + 1)."""
    counts = np.asarray(counts, np.float64)
    total = counts.sum()
    unseen = counts == 0
    probabilities = counts / total
    if unseen.any():
        unseen_mass = min(0.5, max(1.0, float(np.sum(counts == 1))) / total)
        zipf = 1.0 / (np.flatnonzero(unseen) + 1.0)
        probabilities *= 1.0 - unseen_mass
        probabilities[unseen] = unseen_mass * zipf / zipf.sum()
    return np.log(probabilities).astype(np.float32)


def _encoder(bilm, word_char_ids, dim):
    """`encode(ids) -> (len(ids), P)` float32: `bilm`'s layer-0 encoding of those vocabulary words, in chunks."""

    def encode(ids):
        rows = [bilm.encode_words(word_char_ids[ids[i:i + _ENCODING_CHUNK]])
                for i in range(0, len(ids), _ENCODING_CHUNK)]
        return np.concatenate(rows) if rows else np.zeros([0, dim], np.float32)

    return encode


def _gaussian_softmax(outputs, targets, encode, vocab_size, dropout):
    """`(U (V, P), d (V,))` with `h . U[w] + d[w] = log N(h; m_w, S)` up to a constant (see the module docstring)."""
    dim = outputs.shape[1]
    counts = np.bincount(targets, minlength=vocab_size)
    seen = np.flatnonzero(counts)
    seen_counts = counts[seen].astype(np.float64)
    order = np.argsort(targets, kind="stable")
    first_rows = np.searchsorted(targets[order], seen)
    means = np.add.reduceat(outputs[order].astype(np.float64), first_rows, axis=0) / seen_counts[:, None]
    outputs64 = outputs.astype(np.float64)
    within = (outputs64.T @ outputs64 - means.T @ (means * seen_counts[:, None])) / len(targets)
    sampling_noise = np.trace(within)  # a mean of c outputs strays by about this / c
    within = (1 - SHRINKAGE) * within + np.eye(dim) * (SHRINKAGE * sampling_noise / dim)
    if dropout:
        # Training drops out the top layer's units (scaling the others by
        # 1 / (1 - rate)), which adds rate / (1 - rate) * h_j^2 of variance.
        within += np.diag(dropout / (1 - dropout) * np.mean(outputs64 ** 2, axis=0))
    within += np.eye(dim) * (DRIFT_VARIANCE + 1e-8)
    # The prior of each word's mean: a linear map of its encoding, fitted
    # (weighted by counts) on the words of the sample.
    seen_encodings = np.concatenate([encode(seen).astype(np.float64), np.ones([len(seen), 1])], axis=1)
    gram = seen_encodings.T @ (seen_encodings * seen_counts[:, None])
    gram += np.eye(dim + 1) * (1e-3 * np.trace(gram) / (dim + 1))
    mapping = np.linalg.solve(gram, seen_encodings.T @ (means * seen_counts[:, None]))
    # How far the means stray from the map beyond their sampling noise gives
    # the pull towards it: kappa pseudo-counts.
    residual = np.sum((means - seen_encodings @ mapping) ** 2, axis=1)
    spread = max(float(np.mean(residual - sampling_noise / seen_counts)), 1e-3 * sampling_noise)
    kappa = sampling_noise / spread
    precision = np.linalg.inv(within)
    weights = np.zeros([vocab_size, dim], np.float32)
    offsets = np.zeros([vocab_size], np.float32)
    position = np.zeros(vocab_size, np.int64) - 1
    position[seen] = np.arange(len(seen))
    for start in range(0, vocab_size, 65536):
        ids = np.arange(start, min(vocab_size, start + 65536))
        encodings = np.concatenate([encode(ids).astype(np.float64), np.ones([len(ids), 1])], axis=1)
        chunk_means = encodings @ mapping
        rows = position[ids]
        has = rows >= 0
        n = seen_counts[rows[has]][:, None]
        chunk_means[has] = (n * means[rows[has]] + kappa * chunk_means[has]) / (n + kappa)
        projected = chunk_means @ precision
        weights[ids] = projected
        offsets[ids] = -0.5 * np.sum(projected * chunk_means, axis=1)
    return weights, offsets


def fit_scale(outputs, targets, weights, offsets, bias, scale=None):
    """The `s >= 0` minimising the mean of `-log softmax(s * (h . W + d) + bias)[target]`
    (or, given `scale`, that one).

    The loss is convex in `s`: Newton steps, kept inside a bracket of the
    root of its derivative. It is computed on as many positions as
    `_LOGITS_BUDGET` logits allow for this vocabulary (at least 64).

    Returns:
        `(s, perplexity at s)`.
    """
    n = int(np.clip(_LOGITS_BUDGET // max(1, len(bias)), 64, len(targets)))
    scores = outputs[:n] @ weights.T + offsets  # (n, V) float32
    targets = targets[:n]
    prior = np.asarray(bias, np.float64)
    rows_at_once = max(1, _LOGITS_BUDGET // (8 * len(prior)))

    def loss_and_derivatives(s):
        """The loss and its first two derivatives in `s`, over row chunks of float64 temporaries."""
        totals = np.zeros(3)
        for start in range(0, n, rows_at_once):
            chunk = scores[start:start + rows_at_once].astype(np.float64)
            target = np.arange(len(chunk)), targets[start:start + rows_at_once]
            logits = s * chunk + prior
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            normaliser = p.sum(axis=1)
            p /= normaliser[:, None]
            expected = np.sum(p * chunk, axis=1)
            totals += [np.sum(np.log(normaliser) - logits[target]), np.sum(expected - chunk[target]),
                       np.sum(np.sum(p * chunk ** 2, axis=1) - expected ** 2)]
        return totals / n

    if scale is not None:
        return scale, math.exp(loss_and_derivatives(scale)[0])
    at_zero, slope, _ = loss_and_derivatives(0.0)
    if slope >= 0:
        return 0.0, math.exp(at_zero)
    low, high = 0.0, 1.0 / max(float(np.std(scores)), 1e-12)
    while loss_and_derivatives(high)[1] < 0 and high < 1e6:
        low, high = high, 2 * high
    s = 0.5 * (low + high)
    for _ in range(50):
        _, first, second = loss_and_derivatives(s)
        if first < 0:
            low = s
        else:
            high = s
        step = s - first / second if second > 0 else None
        s = step if step is not None and low < step < high else 0.5 * (low + high)
        if high - low < 1e-6 * high:
            break
    return float(s), math.exp(loss_and_derivatives(s)[0])


def positions_of_stream(per_batch, n_positions):
    """`TrainedBiLM.top_outputs`'s result from `per_batch`, which yields for each batch of the stream a list of
    `(top layer outputs (rows, steps, P), next-token ids (rows, steps))` NumPy pairs, one a direction: the
    positions of whole batches until at least `n_positions`, as `(float32 (n, P), int64 (n,))`, in stream order
    (so that the last positions, the scale's, are batches of their own)."""
    outputs, targets, n = [], [], 0
    for pairs in per_batch:
        for top, target in pairs:
            outputs.append(top.reshape(-1, top.shape[-1]))
            targets.append(np.reshape(target, -1))
            n += len(targets[-1])
        if n >= n_positions:
            break
    return np.concatenate(outputs).astype(np.float32), np.concatenate(targets).astype(np.int64)
