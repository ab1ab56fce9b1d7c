import collections
import glob
import math
import os

import pytest

from bilm.text.vocabulary import Vocabulary
from bilm.training.data.sample_corpus import generate_sentences, unigram_perplexity, write_sample_corpus
from bilm.training.data.shards import count_tokens


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_sample_corpus(str(tmp_path_factory.mktemp("sample")))


def read_sentences(pattern):
    sentences = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            sentences += [line.split() for line in f]
    return sentences


def file_bytes(directory):
    return {
        os.path.relpath(path, directory): open(path, "rb").read()
        for path in glob.glob(os.path.join(directory, "**", "*.txt"), recursive=True)
    }


def test_layout_and_size(corpus):
    shards = sorted(glob.glob(corpus["train_prefix"]))
    assert len(shards) == 4
    train = read_sentences(corpus["train_prefix"])
    heldout = read_sentences(corpus["heldout_prefix"])
    assert len(train) == 4000 and len(heldout) == 400
    assert all(sentence for sentence in train + heldout)
    assert len({tuple(s) for s in train}) > 3500  # varied, not a few templates
    assert count_tokens(corpus["train_prefix"]) == sum(map(len, train))
    assert 6 < count_tokens(corpus["train_prefix"]) / len(train) < 20


def test_vocab_special_tokens_first_then_by_count(corpus):
    with open(corpus["vocab_file"], encoding="utf-8") as f:
        lines = f.read().split()
    assert lines[:3] == ["<S>", "</S>", "<UNK>"]
    counts = collections.Counter(t for s in read_sentences(corpus["train_prefix"]) for t in s)
    assert set(lines[3:]) == set(counts)
    assert [counts[t] for t in lines[3:]] == sorted((counts[t] for t in lines[3:]), reverse=True)
    assert 100 < len(lines) < 1000


def test_deterministic(tmp_path):
    first = write_sample_corpus(str(tmp_path / "one"), n_train_sentences=300, n_heldout_sentences=30, n_shards=2)
    write_sample_corpus(str(tmp_path / "two"), n_train_sentences=300, n_heldout_sentences=30, n_shards=2)
    write_sample_corpus(str(tmp_path / "three"), n_train_sentences=300, n_heldout_sentences=30, n_shards=2, seed=1)
    one, two, three = (file_bytes(str(tmp_path / name)) for name in ("one", "two", "three"))
    assert set(one) == {"train/part-00000.txt", "train/part-00001.txt", "heldout/part-00000.txt", "vocab.txt"}
    assert one == two
    assert one["train/part-00000.txt"] != three["train/part-00000.txt"]
    assert first["vocab_file"] == str(tmp_path / "one" / "vocab.txt")


def test_grammar_agreement():
    sentences = generate_sentences(3000, seed=2)
    for tokens in sentences:
        assert tokens[-1] in {".", "?"}
        for word, following in zip(tokens, tokens[1:]):
            if word == "an":
                assert following[0] in "aeiou", tokens
            if word == "a":
                assert following[0] not in "aeiou", tokens
            if word in ("does", "do", "did"):
                assert tokens[-1] == "?", tokens
            if word in ("he", "she") and tokens[-1] == ".":  # questions use the base form
                assert following not in ("sleep", "eat", "run", "are", "were"), tokens
    assert any(t[0] == "if" for t in sentences) and any(t[-1] == "?" for t in sentences)
    assert sum("that" in t for t in sentences) > 100


def test_context_predicts_far_better_than_unigrams(corpus):
    vocab = Vocabulary(corpus["vocab_file"])
    unigram = unigram_perplexity(corpus["heldout_prefix"], vocab)
    assert unigram > 50
    # An add-k bigram model from the training text, evaluated on heldout.
    pairs, firsts = collections.Counter(), collections.Counter()
    for tokens in read_sentences(corpus["train_prefix"]):
        ids = vocab.encode(tokens, split=False).tolist()
        pairs.update(zip(ids, ids[1:]))
        firsts.update(ids[:-1])
    log_prob, n = 0.0, 0
    for tokens in read_sentences(corpus["heldout_prefix"]):
        ids = vocab.encode(tokens, split=False).tolist()
        for a, b in zip(ids, ids[1:]):
            log_prob += math.log((pairs[a, b] + 0.01) / (firsts[a] + 0.01 * vocab.size))
            n += 1
    assert math.exp(-log_prob / n) < unigram / 3


def test_unigram_perplexity_exact(tmp_path):
    (tmp_path / "u.txt").write_text("a b\n\na zz\n", encoding="utf-8")
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("<S>\n</S>\n<UNK>\na\nb\n", encoding="utf-8")
    # Targets: a b </S> a <UNK> </S>  ->  a 2, </S> 2, b 1, <UNK> 1.
    probs = [2 / 6, 2 / 6, 1 / 6, 1 / 6]
    expected = math.exp(-sum(p * math.log(p) for p in probs))
    assert unigram_perplexity(str(tmp_path / "u.txt"), str(vocab_file)) == pytest.approx(expected)
    assert unigram_perplexity(str(tmp_path / "u.txt"), Vocabulary(str(vocab_file))) == pytest.approx(expected)
