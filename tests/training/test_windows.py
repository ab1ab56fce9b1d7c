"""LMDataset, BidirectionalLMDataset and load_vocab: windows, shard order and seeds, bad input, skipping."""
import itertools
import warnings

import numpy as np
import pytest

import bilm.io.formats.text_files as text_files_module
from bilm.text.vocabulary import (
    BOS_CHAR,
    EOS_CHAR,
    UnicodeCharsVocabulary,
    Vocabulary,
    boundary_char_ids,
    token_to_char_ids,
)
from bilm.training.data.lm_dataset import BidirectionalLMDataset, LMDataset, backward_seed, load_vocab
from helpers import write_shard, write_vocab
from training_helpers import TOKENS, C


def chars(*tokens):
    """Char ids of a window: '<S>'/'</S>' are the boundary rows."""
    rows = {"<S>": boundary_char_ids(BOS_CHAR, C), "</S>": boundary_char_ids(EOS_CHAR, C)}
    return np.stack([rows[t] if t in rows else token_to_char_ids(t, C) for t in tokens])


# --- packing ---------------------------------------------------------------


def test_forward_batches_exact(corpus, vocab):
    batches = list(LMDataset(corpus, vocab, test=True).iter_batches(2, 3))
    # The third batch would need a sixth sentence: test mode drops it.
    assert len(batches) == 2
    first, second = batches
    for batch in batches:
        assert set(batch) == {"token_ids", "token_characters", "next_token_id"}
        assert batch["token_ids"].dtype == np.int32 and batch["next_token_id"].dtype == np.int32
        assert batch["token_characters"].dtype == np.int32
        assert batch["token_characters"].shape == (2, 3, C)
    # Row 0: "a b c"; row 1: "zz" (<UNK>) then the start of "e a b c d".
    assert first["token_ids"].tolist() == [[0, 3, 4], [0, 2, 0]]
    assert first["next_token_id"].tolist() == [[3, 4, 5], [2, 1, 7]]
    np.testing.assert_array_equal(first["token_characters"][0], chars("<S>", "a", "b"))
    np.testing.assert_array_equal(first["token_characters"][1], chars("<S>", "zz", "<S>"))
    # Each row carries its sentence on: row 0 ends "a b c" then starts "b";
    # row 1 continues "e a b c d" where it stopped.
    assert second["token_ids"].tolist() == [[5, 0, 4], [7, 3, 4]]
    assert second["next_token_id"].tolist() == [[1, 4, 1], [3, 4, 5]]
    np.testing.assert_array_equal(second["token_characters"][0], chars("c", "<S>", "b"))
    np.testing.assert_array_equal(second["token_characters"][1], chars("e", "a", "b"))


def test_reverse_stream_reverses_tokens_and_swaps_frame(corpus, vocab):
    batches = list(LMDataset(corpus, vocab, reverse=True, test=True).iter_batches(2, 3))
    assert len(batches) == 2
    first, second = batches
    # "a b c" -> </S> c b a <S>; "zz" -> </S> zz <S>; "e a b c d" -> </S> d c b a e <S>.
    assert first["token_ids"].tolist() == [[1, 5, 4], [1, 2, 1]]
    assert first["next_token_id"].tolist() == [[5, 4, 3], [2, 0, 6]]
    np.testing.assert_array_equal(first["token_characters"][0], chars("</S>", "c", "b"))
    np.testing.assert_array_equal(first["token_characters"][1], chars("</S>", "zz", "</S>"))
    assert second["token_ids"].tolist() == [[3, 1, 4], [6, 5, 4]]
    assert second["next_token_id"].tolist() == [[0, 4, 0], [5, 4, 3]]


def test_bidirectional_batches_are_both_directions(corpus, vocab):
    forward = list(LMDataset(corpus, vocab, test=True).iter_batches(2, 3))
    backward = list(LMDataset(corpus, vocab, reverse=True, test=True).iter_batches(2, 3))
    both = list(BidirectionalLMDataset(corpus, vocab, test=True).iter_batches(2, 3))
    assert len(both) == 2
    for batch, fw, bw in zip(both, forward, backward):
        for key in ("token_ids", "token_characters", "next_token_id"):
            np.testing.assert_array_equal(batch[key], fw[key])
            np.testing.assert_array_equal(batch[key + "_reverse"], bw[key])


def test_long_sentence_spans_windows(tmp_path, vocab):
    pattern = write_shard(tmp_path, "long.txt", [" ".join(["a", "b", "c", "d", "e"] * 2)])
    ids = vocab.encode(" ".join(["a", "b", "c", "d", "e"] * 2))  # 12 ids, 11 inputs
    batches = list(LMDataset(pattern, vocab, test=True).iter_batches(1, 3))
    assert len(batches) == 3  # 9 inputs fit; the last 2 are an incomplete batch
    np.testing.assert_array_equal(np.concatenate([b["token_ids"][0] for b in batches]), ids[:9])
    np.testing.assert_array_equal(np.concatenate([b["next_token_id"][0] for b in batches]), ids[1:10])


def test_token_only_vocabulary_has_no_characters(corpus, tmp_path):
    vocab = Vocabulary(write_vocab(tmp_path, TOKENS))
    data = LMDataset(corpus, vocab, test=True)
    assert data.max_word_length is None
    batch = next(data.iter_batches(2, 3))
    assert batch["token_characters"] is None
    assert batch["token_ids"].tolist() == [[0, 3, 4], [0, 2, 0]]


def test_oov_maps_to_unk_and_chars_come_from_the_token(tmp_path, vocab):
    pattern = write_shard(tmp_path, "oov.txt", ["naïve a"])
    ids, char_ids = next(LMDataset(pattern, vocab, test=True).iter_sentences())
    assert ids.tolist() == [0, 2, 3, 1]
    # 'naïve' is 6 bytes; C = 5 keeps the first 3 of them.
    assert char_ids[1].tolist() == [258, ord("n"), ord("a"), 0xC3, 259]
    assert char_ids[1].tolist() != vocab.word_char_ids[vocab.unk].tolist()


@pytest.mark.parametrize("reverse", [False, True])
def test_char_ids_equal_encode_chars(tmp_path, vocab, reverse):
    line = "a zz <UNK> <S> b naïve </S> e"
    pattern = write_shard(tmp_path, "mixed.txt", [line])
    ids, char_ids = next(LMDataset(pattern, vocab, reverse=reverse, test=True).iter_sentences())
    tokens = line.split()[::-1] if reverse else line.split()
    np.testing.assert_array_equal(ids, vocab.encode(tokens, reverse, split=False))
    np.testing.assert_array_equal(char_ids, vocab.encode_chars(tokens, reverse, split=False))
    assert char_ids.dtype == np.int32 and char_ids.shape == (10, C)


def test_training_loops_forever_and_restarts_per_call(corpus, vocab):
    data = LMDataset(corpus, vocab, seed=3)
    # 5 sentences hold 5 + 3 + 7 + 3 + 4 - 5 = 17 inputs; 10 batches of 6 need more passes.
    batches = list(itertools.islice(data.iter_batches(2, 3), 10))
    assert len(batches) == 10
    again = next(data.iter_batches(2, 3))
    np.testing.assert_array_equal(again["token_ids"], batches[0]["token_ids"])


def test_invalid_window_shape(corpus, vocab):
    with pytest.raises(ValueError, match="num_steps"):
        next(LMDataset(corpus, vocab).iter_batches(2, 0))


# --- shards, order, randomness ---------------------------------------------


@pytest.fixture
def three_shards(tmp_path):
    # Shard k holds tokens 'k0' .. 'k9', one sentence each.
    for k in range(3):
        write_shard(tmp_path, f"part-{k}.txt", [f"{k}{i}" for i in range(10)])
    tokens = [f"{k}{i}" for k in range(3) for i in range(10)]
    vocab = Vocabulary(write_vocab(tmp_path, tokens))
    return str(tmp_path / "part-*.txt"), vocab


def sentence_words(data, n):
    return [data.vocab.id_to_word(int(ids[1])) for ids, _ in itertools.islice(data.iter_sentences(), n)]


def test_test_mode_reads_shards_once_in_sorted_order(three_shards):
    pattern, vocab = three_shards
    data = LMDataset(pattern, vocab, test=True, shuffle_on_load=True, seed=1)
    words = [vocab.id_to_word(int(ids[1])) for ids, _ in data.iter_sentences()]
    assert words == [f"{k}{i}" for k in range(3) for i in range(10)]


def test_training_reads_whole_shards_in_shuffled_order(three_shards):
    pattern, vocab = three_shards
    words = sentence_words(LMDataset(pattern, vocab, seed=0), 90)
    shard_runs = [words[i : i + 10] for i in range(0, 90, 10)]
    for run in shard_runs:
        # A whole shard, in file order.
        assert run == [f"{run[0][0]}{i}" for i in range(10)]
    passes = [[run[0][0] for run in shard_runs[p : p + 3]] for p in range(0, 9, 3)]
    assert all(sorted(order) == ["0", "1", "2"] for order in passes)
    assert len({tuple(order) for order in passes}) > 1


def test_shuffle_on_load_shuffles_within_each_shard(three_shards):
    pattern, vocab = three_shards
    words = sentence_words(LMDataset(pattern, vocab, shuffle_on_load=True, seed=0), 30)
    for start in range(0, 30, 10):
        run = words[start : start + 10]
        assert {word[0] for word in run} == {run[0][0]}  # one shard at a time
        assert sorted(run) == [f"{run[0][0]}{i}" for i in range(10)]
    assert words != sorted(words)


def test_seed_makes_the_stream_deterministic(three_shards):
    pattern, vocab = three_shards
    first = sentence_words(LMDataset(pattern, vocab, shuffle_on_load=True, seed=7), 60)
    second = sentence_words(LMDataset(pattern, vocab, shuffle_on_load=True, seed=7), 60)
    other = sentence_words(LMDataset(pattern, vocab, shuffle_on_load=True, seed=8), 60)
    assert first == second
    assert first != other
    unseeded = LMDataset(pattern, vocab, shuffle_on_load=True)
    assert isinstance(unseeded.seed, int)
    assert sentence_words(unseeded, 60) == sentence_words(unseeded, 60)


@pytest.mark.parametrize("shuffle_on_load", [False, True])
def test_only_one_shard_is_open_at_a_time(three_shards, monkeypatch, shuffle_on_load):
    pattern, vocab = three_shards
    opened = []

    def probe(path, *args, **kwargs):
        assert all(f.closed for f in opened), "a shard was opened while another is still open"
        f = open(path, *args, **kwargs)
        opened.append(f)
        return f

    monkeypatch.setattr(text_files_module, "open", probe, raising=False)
    data = LMDataset(pattern, vocab, shuffle_on_load=shuffle_on_load, seed=0)
    list(itertools.islice(data.iter_batches(2, 4), 40))
    assert len(opened) > 6  # three at construction, then several passes


def test_bidirectional_training_streams_read_the_corpus_in_their_own_orders(three_shards):
    pattern, vocab = three_shards
    data = BidirectionalLMDataset(pattern, vocab, shuffle_on_load=True, seed=5)
    assert data.seed == data.forward.seed == 5 and data.backward.seed == backward_seed(5) != 5
    n = 200
    forward = [tuple(ids) for ids, _ in itertools.islice(data.forward.iter_sentences(), n)]
    backward = [tuple(ids[::-1]) for ids, _ in itertools.islice(data.backward.iter_sentences(), n)]
    # Another order: rows of the two directions hold different sentences.
    assert sum(f == b for f, b in zip(forward, backward)) < n // 4
    # Each direction is its own LMDataset's stream: reversed sentences of the backward seed.
    alone = LMDataset(pattern, vocab, reverse=True, shuffle_on_load=True, seed=backward_seed(5))
    for (mine, _), (its, _) in zip(itertools.islice(data.backward.iter_sentences(), 50), alone.iter_sentences()):
        np.testing.assert_array_equal(mine, its)
    # Restarting from the same seed gives the same batches in both directions.
    again = BidirectionalLMDataset(pattern, vocab, shuffle_on_load=True, seed=5)
    for a, b in zip(itertools.islice(data.iter_batches(3, 4), 10), again.iter_batches(3, 4)):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_bidirectional_test_streams_read_the_files_in_order_both_ways(three_shards):
    pattern, vocab = three_shards
    data = BidirectionalLMDataset(pattern, vocab, test=True)
    for (forward, _), (backward, _) in zip(data.forward.iter_sentences(), data.backward.iter_sentences()):
        np.testing.assert_array_equal(backward, forward[::-1])


# --- bad input -------------------------------------------------------------


def test_empty_shards_are_skipped_with_a_warning(tmp_path, vocab):
    write_shard(tmp_path, "s0.txt", [])
    write_shard(tmp_path, "s1.txt", ["", "   ", "\t"])
    write_shard(tmp_path, "s2.txt", ["", "a b", "", "c"])
    with pytest.warns(UserWarning) as record:
        data = LMDataset(str(tmp_path / "s*.txt"), vocab, test=True)
    messages = " ".join(str(w.message) for w in record)
    assert "s0.txt" in messages and "s1.txt" in messages and "s2.txt" not in messages
    assert [ids.tolist() for ids, _ in data.iter_sentences()] == [[0, 3, 4, 1], [0, 5, 1]]


def test_all_shards_empty(tmp_path, vocab):
    write_shard(tmp_path, "s0.txt", [])
    write_shard(tmp_path, "s1.txt", [" "])
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="empty"):
        LMDataset(str(tmp_path / "s*.txt"), vocab)


def test_vocabulary_without_special_tokens(tmp_path, corpus):
    path = tmp_path / "bad_vocab.txt"
    path.write_text("<S>\na\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad_vocab\.txt.*</S>, <UNK>"):
        LMDataset(corpus, Vocabulary(str(path)))
    with pytest.raises(ValueError, match="bad_vocab.txt"):
        load_vocab(str(path), 50)


def test_invalid_utf8_bytes_reach_the_char_ids_and_warn_once(tmp_path, vocab):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"a \xff\xfe b\nc \xe9\n")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        data = BidirectionalLMDataset(str(path), vocab, seed=0)
        batches = list(itertools.islice(data.iter_batches(1, 3), 12))  # several passes
    relevant = [w for w in record if "latin1.txt" in str(w.message)]
    assert len(relevant) == 1 and "UTF-8" in str(relevant[0].message)
    first = batches[0]
    assert first["token_ids"].tolist() == [[0, 3, 2]]
    assert first["token_characters"][0, 2].tolist() == [258, 0xFF, 0xFE, 259, 260]
    assert first["token_ids_reverse"].tolist() == [[1, 4, 2]]
    assert first["token_characters_reverse"][0, 2].tolist() == [258, 0xFF, 0xFE, 259, 260]


# --- load_vocab ------------------------------------------------------------


def test_load_vocab(tmp_path):
    path = write_vocab(tmp_path, TOKENS)
    chars_vocab = load_vocab(path, 7)
    assert isinstance(chars_vocab, UnicodeCharsVocabulary) and chars_vocab.max_word_length == 7
    tokens_vocab = load_vocab(path)
    assert type(tokens_vocab) is Vocabulary and tokens_vocab.size == 8


# --- skipping windows ------------------------------------------------------


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("test_mode", [False, True])
def test_skipping_windows_equals_reading_and_dropping_them(tmp_path, vocab, reverse, test_mode):
    # Sentences longer and shorter than a window, an out-of-vocabulary token
    # and an empty line, over several passes in training mode.
    lines = ["a b c", "zz", "e a b c d a b", "", "b", "c d e a", "d"]
    write_shard(tmp_path, "s0.txt", lines[:4])
    write_shard(tmp_path, "s1.txt", lines[4:])
    pattern = str(tmp_path / "s*.txt")
    data = LMDataset(pattern, vocab, reverse=reverse, test=test_mode, seed=3)
    expected = list(itertools.islice(data.iter_batches(2, 3), 12))
    n = len(expected)  # all of them in test mode
    assert n >= 3
    for skip in (1, 2, 3, n - 1, n + 5):
        got = list(itertools.islice(data.iter_batches(2, 3, skip=skip), 12))
        if test_mode:
            assert len(got) == max(0, n - skip)
        for a, b in zip(got, expected[skip:]):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"skip {skip}: {key}")


def test_bidirectional_skip_keeps_the_directions_aligned(corpus, vocab):
    data = BidirectionalLMDataset(corpus, vocab, seed=1)
    expected = list(itertools.islice(data.iter_batches(2, 3), 9))
    got = list(itertools.islice(data.iter_batches(2, 3, skip=5), 4))
    for a, b in zip(got, expected[5:]):
        for key in b:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
