import numpy as np
import pytest

from bilm.text.batching import Batcher, TokenBatcher
from bilm.text.vocabulary import UnicodeCharsVocabulary, UnknownTokenError
from helpers import write_lines

# Shifted (+1) ids: begin/end of word, padding, begin/end of sentence.
BOW, EOW, PAD, BOS, EOS = 259, 260, 261, 257, 258


@pytest.fixture
def vocab_file(tmp_path):
    return write_lines(tmp_path, ["<S>", "</S>", "<UNK>", "the", "!!!MAXTERMID", "cat", "sat"])


def shifted(token, n):
    """Expected shifted row of an ASCII token that fits in n characters."""
    row = [BOW] + [ord(c) + 1 for c in token] + [EOW]
    return row + [PAD] * (n - len(row))


# --- Batcher ---------------------------------------------------------------------


def test_batcher_shift_boundaries_and_padding(vocab_file):
    batch = Batcher(vocab_file, 6).batch_sentences([["the", "cat", "sat"], ["dog"]])
    assert batch.dtype == np.int32
    assert batch.shape == (2, 5, 6)
    assert batch[0].tolist() == [
        [BOW, BOS, EOW, PAD, PAD, PAD],
        shifted("the", 6),
        shifted("cat", 6),
        shifted("sat", 6),
        [BOW, EOS, EOW, PAD, PAD, PAD],
    ]
    assert batch[1, :3].tolist() == [
        [BOW, BOS, EOW, PAD, PAD, PAD],
        shifted("dog", 6),  # not in the vocabulary: computed
        [BOW, EOS, EOW, PAD, PAD, PAD],
    ]
    # Whole token rows after the sentence are zeros ("no token").
    assert (batch[1, 3:] == 0).all()
    assert (batch[0] > 0).all()


def test_batcher_equals_shifted_encode_chars(vocab_file):
    sentences = [["the", "中文", "unknownword", b"\xff"], [], ["<S>", "cat"]]
    batch = Batcher(vocab_file, 7).batch_sentences(sentences)
    vocab = UnicodeCharsVocabulary(vocab_file, 7)
    for row, sentence in zip(batch, sentences):
        expected = vocab.encode_chars(sentence, split=False) + 1
        np.testing.assert_array_equal(row[: len(sentence) + 2], expected)
        assert (row[len(sentence) + 2 :] == 0).all()


def test_batcher_truncates_long_and_multibyte_tokens(vocab_file):
    batch = Batcher(vocab_file, 5).batch_sentences([["thhhhh", "中"]])
    assert batch[0, 1].tolist() == [BOW, ord("t") + 1, ord("h") + 1, ord("h") + 1, EOW]
    assert batch[0, 2].tolist() == [BOW, 0xE4 + 1, 0xB8 + 1, 0xAD + 1, EOW]


def test_batcher_without_vocabulary_file_gives_same_ids(tmp_path, vocab_file):
    sentences = [["the", "cat"], ["a", "<S>", "</S>", "é"]]
    expected = Batcher(vocab_file, 8).batch_sentences(sentences)
    np.testing.assert_array_equal(Batcher(None, 8).batch_sentences(sentences), expected)
    # A file without <S>, </S> and <UNK> works too: it is only a cache.
    bare = write_lines(tmp_path, ["cat", "a"], name="bare.txt")
    np.testing.assert_array_equal(Batcher(bare, 8).batch_sentences(sentences), expected)


def test_batcher_empty_list_and_empty_sentence(vocab_file):
    batcher = Batcher(vocab_file, 4)
    empty = batcher.batch_sentences([])
    assert empty.shape == (0, 2, 4) and empty.dtype == np.int32
    batch = batcher.batch_sentences([[]])
    assert batch.tolist() == [[[BOW, BOS, EOW, PAD], [BOW, EOS, EOW, PAD]]]


def test_batcher_surrogateescape_and_bytes_tokens(vocab_file):
    raw = b"a\xfe"
    sentences = [[raw.decode("utf-8", "surrogateescape"), raw]]
    batch = Batcher(vocab_file, 5).batch_sentences(sentences)
    expected = [BOW, ord("a") + 1, 0xFE + 1, EOW, PAD]
    assert batch[0, 1].tolist() == expected
    assert batch[0, 2].tolist() == expected


def test_batcher_cache_returns_consistent_rows(vocab_file):
    batcher = Batcher(vocab_file, 6)
    first = batcher.batch_sentences([["dog", "the"]])
    first[...] = -1  # the caller owns the result; the cache is not affected
    second = batcher.batch_sentences([["dog", "the"]])
    assert second[0, 1].tolist() == shifted("dog", 6)
    assert second[0, 2].tolist() == shifted("the", 6)


def test_batcher_rejects_strings(vocab_file):
    batcher = Batcher(vocab_file, 6)
    with pytest.raises(TypeError, match="list of sentences"):
        batcher.batch_sentences("the cat")
    with pytest.raises(TypeError, match=r"sentences\[1\]"):
        batcher.batch_sentences([["the"], "the cat"])
    with pytest.raises(TypeError, match=r"sentences\[0\].*str or bytes"):
        batcher.batch_sentences([["the", 3]])


def test_batcher_checks_max_token_length(vocab_file):
    with pytest.raises(ValueError, match="at least 3"):
        Batcher(vocab_file, 2)


# --- TokenBatcher ------------------------------------------------------------------


def test_token_batcher_ids_and_padding(vocab_file):
    batch = TokenBatcher(vocab_file).batch_sentences([["the", "cat", "sat"], ["cat"], []])
    assert batch.dtype == np.int32
    # Ids: <S> 0, </S> 1, <UNK> 2, the 3, cat 4, sat 5 (MAXTERMID skipped); +1.
    assert batch.tolist() == [
        [1, 4, 5, 6, 2],
        [1, 5, 2, 0, 0],
        [1, 2, 0, 0, 0],
    ]


def test_token_batcher_unknown_tokens(tmp_path, vocab_file):
    batch = TokenBatcher(vocab_file).batch_sentences([["the", "dog"]])
    assert batch.tolist() == [[1, 4, 3, 2]]  # dog -> <UNK> (2) + 1
    no_unk = write_lines(tmp_path, ["<S>", "</S>", "the"], name="no_unk.txt")
    batcher = TokenBatcher(no_unk)
    assert batcher.batch_sentences([["the"]]).tolist() == [[1, 3, 2]]
    with pytest.raises(UnknownTokenError) as info:
        batcher.batch_sentences([["the", "dog"]])
    assert "'dog'" in str(info.value) and no_unk in str(info.value)


def test_token_batcher_needs_boundary_tokens(tmp_path):
    path = write_lines(tmp_path, ["<UNK>", "</S>", "the"])
    with pytest.raises(ValueError) as info:
        TokenBatcher(path)
    message = str(info.value)
    assert path in message and "lacks <S>." in message


def test_token_batcher_empty_list_and_strings(vocab_file):
    batcher = TokenBatcher(vocab_file)
    empty = batcher.batch_sentences([])
    assert empty.shape == (0, 2) and empty.dtype == np.int32
    with pytest.raises(TypeError, match=r"sentences\[0\]"):
        batcher.batch_sentences(["the cat"])
