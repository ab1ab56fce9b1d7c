"""A training vocabulary's order against the corpus's counts: descending frequency passes, other orders warn."""
import warnings

import pytest

from bilm.text.vocabulary import Vocabulary
from bilm.training.data.vocab_builder import build_vocab
from bilm.training.data.vocabulary_order import frequency_rank_correlation, warn_unless_frequency_order
from helpers import write_shard, write_vocab


@pytest.fixture
def corpus(tmp_path):
    # Word k of 30 appears 60 // (k + 1) times (Zipf's law), spread over two shards.
    words = [f"w{k:02d}" for k in range(30)]
    tokens = [word for k, word in enumerate(words) for _ in range(60 // (k + 1))]
    lines = [" ".join(tokens[i:i + 5]) for i in range(0, len(tokens), 5)]
    write_shard(tmp_path, "s0.txt", lines[::2])
    write_shard(tmp_path, "s1.txt", lines[1::2])
    return str(tmp_path / "s*.txt"), words


def test_a_built_vocabulary_is_in_frequency_order(tmp_path, corpus):
    pattern, _ = corpus
    build_vocab(pattern, str(tmp_path / "vocab.txt"))
    vocab = Vocabulary(str(tmp_path / "vocab.txt"), validate_file=True)
    assert frequency_rank_correlation(vocab, pattern) > 0.95  # below 1 only by ties of counts
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unless_frequency_order(vocab, pattern)


@pytest.mark.parametrize("order, expected", [(lambda w: w[::-1], -1.0), (sorted, 1.0)])
def test_other_orders_warn(tmp_path, corpus, order, expected):
    pattern, words = corpus
    # Reversed: the rarest word first. The shuffled case below is unrelated to frequency.
    vocab = Vocabulary(write_vocab(tmp_path, order(words)), validate_file=True)
    correlation = frequency_rank_correlation(vocab, pattern)
    assert correlation == pytest.approx(expected, abs=0.05)
    if expected < 0:
        with pytest.warns(UserWarning, match=r"order of .*vocab.txt contradicts the counts of its tokens in .*s\*.txt "
                                             r"\(rank correlation -0.9"):
            warn_unless_frequency_order(vocab, pattern)


def test_an_order_unrelated_to_frequency_warns(tmp_path, corpus):
    pattern, words = corpus
    shuffled = words[1::2] + words[::2]  # every other word first: correlation about 0
    vocab = Vocabulary(write_vocab(tmp_path, shuffled), validate_file=True)
    with pytest.warns(UserWarning, match="bin/build_vocab.py"):
        assert abs(warn_unless_frequency_order(vocab, pattern)) < 0.5


def test_only_the_first_tokens_are_counted_and_even_counts_are_no_order(tmp_path, corpus):
    pattern, words = corpus
    vocab = Vocabulary(write_vocab(tmp_path, words[::-1]), validate_file=True)
    assert frequency_rank_correlation(vocab, pattern, max_tokens=1) is None
    # The first 120 tokens hold w00 60 times, w01 30, w02 20 and w03 10: still uneven.
    assert frequency_rank_correlation(vocab, pattern, max_tokens=120) is not None
    write_shard(tmp_path, "even.txt", [" ".join(words)] * 3)
    assert frequency_rank_correlation(vocab, str(tmp_path / "even.txt")) is None
