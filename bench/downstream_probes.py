"""Cheap checks of a biLM's features for a task, before any classifier is tuned (bench_downstream.py --diagnose).

- `layer_probes`: a logistic regression (L2, fitted by Newton's method on
  standardised features, its coefficient picked on dev) on each layer's
  mean over a sentence, and on the three means concatenated; train, dev and
  test accuracy. A probe that cannot fit the training split says the
  features do not hold the label in a form a small model finds.
- `nearest_neighbours`: for a few words, the words whose vectors are
  closest (cosine, after centring), per layer: layer 0 of the word alone
  (context-free) and each layer's mean over the word's occurrences in the
  training split. Sentiment words whose neighbours are their antonyms or
  words spelled alike say the biLM encodes form and syntax more than
  polarity.
- The same probes on a randomly initialised biLM of the same shape
  (`bilm.models.random_weights`), the floor pretraining must rise above.
"""
import collections

import numpy as np

PROBE_L2 = (1e-4, 1e-3, 1e-2, 1e-1)
NEIGHBOUR_WORDS = ("good", "bad", "great", "dull", "boring", "funny", "worst")
MIN_WORD_COUNT = 5


def sentence_means(split):
    """`(n_sentences, n_layers, dim)` float32: each sentence's mean of each layer (`split.layers` is flat)."""
    totals = np.cumsum(split.layers.astype(np.float64), axis=0)
    totals = np.concatenate([np.zeros((1,) + totals.shape[1:]), totals])
    sums = totals[split.offsets[1:]] - totals[split.offsets[:-1]]
    return (sums / np.maximum(split.lengths, 1)[:, None, None]).astype(np.float32)


def _fit_logistic(x, y, l2, iterations=30):
    """Weights `(dim + 1,)` (bias last) minimising mean log loss + `l2 / 2 * |w|^2`, by Newton's method."""
    x = np.concatenate([x, np.ones((len(x), 1))], axis=1).astype(np.float64)
    penalty = np.full(x.shape[1], l2)
    penalty[-1] = 0.0
    w = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) / len(x) + penalty * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x / len(x) + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-7:
            break
    return w


def _accuracy(x, y, w):
    return float(np.mean(((x @ w[:-1] + w[-1]) > 0) == y))


def logistic_probe(features, labels):
    """`{"l2", "train", "dev", "test"}` of the probe on `features[split]` `(n, dim)` (see the module docstring)."""
    mean, std = features["train"].mean(0), features["train"].std(0) + 1e-6
    x = {name: (value - mean) / std for name, value in features.items()}
    best = None
    for l2 in PROBE_L2:
        w = _fit_logistic(x["train"], labels["train"], l2)
        result = {"l2": l2, **{name: _accuracy(x[name], labels[name], w) for name in ("train", "dev", "test")}}
        if best is None or result["dev"] > best["dev"]:
            best = result
    return best


def layer_probes(splits):
    """`{"layer_0": probe, ..., "all_layers": probe}` on the sentence means of `splits` (`Split`s with layers)."""
    means = {name: sentence_means(split) for name, split in splits.items()}
    labels = {name: split.labels for name, split in splits.items()}
    probes = {f"layer_{k}": logistic_probe({name: m[:, k] for name, m in means.items()}, labels)
              for k in range(means["train"].shape[1])}
    probes["all_layers"] = logistic_probe({name: m.reshape(len(m), -1) for name, m in means.items()}, labels)
    return probes


def nearest_neighbours(elmo, train_examples, train_layers, words=NEIGHBOUR_WORDS, k=6):
    """`{word: {"layer_0_alone": [...], "layer_0": [...], ...}}`, the `k` nearest of each of `words`.

    Candidates are the lowercased alphabetic tokens seen `MIN_WORD_COUNT`
    times or more in `train_examples` (`[(tokens, label)]`, whose flat
    layers `(n_tokens, n_layers, dim)` are `train_layers`).
    """
    tokens = [token.lower() for sentence, _ in train_examples for token in sentence]
    counts = collections.Counter(tokens)
    vocabulary = sorted(w for w, c in counts.items() if c >= MIN_WORD_COUNT and w.isalpha())
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = np.array([index.get(token, -1) for token in tokens])
    seen = ids >= 0
    sums = np.zeros((len(vocabulary),) + train_layers.shape[1:])
    np.add.at(sums, ids[seen], train_layers[seen].astype(np.float64))
    in_context = sums / np.bincount(ids[seen], minlength=len(vocabulary))[:, None, None]
    alone = np.stack([layers[0, 0] for layers in elmo.embed([[w] for w in vocabulary], layers="all", verbose=0)])
    tables = {"layer_0_alone": alone, **{f"layer_{j}": in_context[:, j] for j in range(in_context.shape[1])}}
    result = {}
    for word in words:
        if word not in index:
            continue
        result[word] = {}
        for name, vectors in tables.items():
            centred = vectors - vectors.mean(0)
            centred /= np.linalg.norm(centred, axis=1, keepdims=True) + 1e-12
            order = np.argsort(-(centred @ centred[index[word]]))
            result[word][name] = [vocabulary[i] for i in order if i != index[word]][:k]
    return result
