"""Whether a training vocabulary ranks its tokens by their frequency in the corpus.

The sampled softmax draws its negatives from a log-uniform distribution
over the ids, which stands for the tokens' frequencies only if the ids rank
them by frequency (what `bin/build_vocab.py` writes). A vocabulary in
another order trains without an error, but the negatives are the wrong
words: the training loss looks better while the model is worse.
"""
import itertools
import warnings

import numpy as np

from bilm.text.vocabulary import TRAINING_TOKENS
from bilm.text.whitespace import split_tokens
from bilm.training.data.shards import list_shards, read_lines

# Below this rank correlation between ids and corpus counts, the order contradicts the corpus.
MIN_RANK_CORRELATION = 0.5
# Counts whose largest is less than this many times their median are too even for the order to matter
# (every order then misleads the sampler alike); natural text is far above it.
EVEN_COUNTS_RATIO = 4


def _ranks(values):
    """Ranks of `values` (0-based, ties given their mean rank)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def frequency_rank_correlation(vocab, filepattern, max_tokens=1_000_000):
    """Spearman's correlation between the ids of the vocabulary's tokens and their counts in the corpus.

    Counts the first `max_tokens` tokens of the shards (in file order); the
    three special tokens are left out. 1 means ids in descending frequency
    order, about 0 an order unrelated to frequency (alphabetical), -1 the
    reverse. None when fewer than two tokens were counted, or when their
    counts are too even for an order to matter (`EVEN_COUNTS_RATIO`).
    """
    special = {vocab.word_to_id(token) for token in TRAINING_TOKENS}
    counts = np.zeros(vocab.size, np.int64)
    lines = (line for path in list_shards(filepattern) for line in read_lines(path, warn_invalid_utf8=False))
    tokens = itertools.islice((token for line in lines for token in split_tokens(line)), max_tokens)
    for token in tokens:
        counts[vocab.word_to_id(token)] += 1
    ids = np.array([i for i in range(vocab.size) if i not in special and counts[i] > 0])
    if len(ids) < 2 or counts[ids].max() < EVEN_COUNTS_RATIO * np.median(counts[ids]):
        return None
    # Higher count should mean lower id: correlate ids with negated counts.
    id_ranks, count_ranks = _ranks(ids), _ranks(-counts[ids])
    if np.std(count_ranks) == 0:
        return None
    return float(np.corrcoef(id_ranks, count_ranks)[0, 1])


def warn_unless_frequency_order(vocab, filepattern, max_tokens=1_000_000):
    """Warns, naming the vocabulary file, when its order contradicts the corpus's counts
    (`frequency_rank_correlation` below `MIN_RANK_CORRELATION`); returns the correlation."""
    correlation = frequency_rank_correlation(vocab, filepattern, max_tokens)
    if correlation is not None and correlation < MIN_RANK_CORRELATION:
        warnings.warn(
            f"The order of {vocab.filename} contradicts the counts of its tokens in {filepattern} (rank "
            f"correlation {correlation:.2f}, 1 for descending frequency): the sampled softmax draws its negatives "
            "as if the ids ranked the tokens by frequency, so training would learn worse than its progress line "
            "shows. Build the vocabulary from the training text with bin/build_vocab.py.", stacklevel=2)
    return correlation
