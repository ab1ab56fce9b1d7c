"""In-graph text -> ids against `Batcher` / `TokenBatcher`."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.text.batching import Batcher, TokenBatcher
from bilm.text.graph_batching import (
    batch_char_ids,
    batch_token_ids,
    sentences_to_tokens,
    token_lengths,
    token_vocab_table,
)
from helpers import SENTENCES, write_vocab

# ASCII, multi-byte UTF-8 (2, 3 and 4 bytes), a token longer than the limit,
# an empty sentence, a NUL byte, and characters cut by the byte limit.
MIXED = SENTENCES + [["ééé", "中文字", "a\x00b"], ["🙂🙂", "x"]]


def _pad(sentences, extra=0):
    width = max(map(len, sentences)) + extra
    return tf.constant([s + [""] * (width - len(s)) for s in sentences])


@pytest.mark.parametrize("max_chars", [3, 4, 5, 7, 50])
def test_char_ids_equal_batcher(max_chars):
    ids = batch_char_ids(_pad(MIXED), max_chars)
    expected = Batcher(None, max_chars).batch_sentences(MIXED)
    assert ids.dtype == tf.int32
    np.testing.assert_array_equal(ids.numpy(), expected)


def test_char_ids_spec_examples_and_byte_truncation():
    ids = batch_char_ids(tf.constant([["th", "thhhhh", chr(256) + "t", "中"]]), 5).numpy()[0] - 1
    np.testing.assert_array_equal(ids[0], [258, 256, 259, 260, 260])  # <S>
    np.testing.assert_array_equal(ids[1], [258, 116, 104, 259, 260])
    np.testing.assert_array_equal(ids[2], [258, 116, 104, 104, 259])
    np.testing.assert_array_equal(ids[3], [258, 196, 128, 116, 259])
    # '中' is 3 bytes (e4 b8 ad); the limit of 3 bytes keeps all of them.
    np.testing.assert_array_equal(ids[4], [258, 0xE4, 0xB8, 0xAD, 259])
    np.testing.assert_array_equal(ids[5], [258, 257, 259, 260, 260])  # </S>
    # With 2 bytes allowed the character is cut after its second byte.
    cut = batch_char_ids(tf.constant([["中"]]), 4).numpy()[0, 1] - 1
    np.testing.assert_array_equal(cut, [258, 0xE4, 0xB8, 259])


def test_tokens_after_the_first_padding_are_ignored():
    tokens = tf.constant([["a", "", "b", "c"], ["x", "y", "z", ""]])
    ids = batch_char_ids(tokens, 7).numpy()
    expected = Batcher(None, 7).batch_sentences([["a"], ["x", "y", "z"]])
    assert ids.shape == (2, 6, 7)
    np.testing.assert_array_equal(ids[:, :5], expected)
    assert not ids[:, 5].any()
    np.testing.assert_array_equal(token_lengths(tokens).numpy(), [1, 3])


def test_extra_padding_columns_are_zero_rows():
    ids = batch_char_ids(_pad(MIXED, extra=3), 7).numpy()
    expected = Batcher(None, 7).batch_sentences(MIXED)
    np.testing.assert_array_equal(ids[:, : expected.shape[1]], expected)
    assert not ids[:, expected.shape[1]:].any()


def test_sequence_len_counts_empty_tokens_inside_the_length():
    tokens = tf.constant([["a", "", "b", "junk"], ["x", "y", "", ""]])
    ids = batch_char_ids(tokens, 7, sequence_len=tf.constant([3, 1])).numpy()
    expected = Batcher(None, 7).batch_sentences([["a", "", "b"], ["x"]])
    np.testing.assert_array_equal(ids[:, :5], expected)
    assert not ids[:, 5].any()
    # Lengths beyond the width are clipped.
    np.testing.assert_array_equal(token_lengths(tokens, tf.constant([9, -1])).numpy(), [4, 0])


def test_char_ids_in_tf_function_with_unknown_shapes():
    convert = tf.function(lambda tokens: batch_char_ids(tokens, 7),
                          input_signature=[tf.TensorSpec([None, None], tf.string)])
    np.testing.assert_array_equal(convert(_pad(MIXED)).numpy(), Batcher(None, 7).batch_sentences(MIXED))


def test_all_padding_and_empty_batches():
    ids = batch_char_ids(tf.constant([["", ""], ["", ""]]), 5).numpy()
    np.testing.assert_array_equal(ids[:, :2], np.broadcast_to(Batcher(None, 5).batch_sentences([[]]), (2, 2, 5)))
    assert not ids[:, 2:].any()
    assert batch_char_ids(tf.zeros([0, 0], tf.string), 5).shape == (0, 2, 5)
    assert batch_char_ids(tf.zeros([3, 0], tf.string), 5).shape == (3, 2, 5)


def test_sentences_to_tokens_splits_on_whitespace():
    sentences = ["  The cat\tsat .\n", "", "Hi", "naïve  中文 🙂"]
    tokens = sentences_to_tokens(tf.constant(sentences)).numpy()
    assert tokens.shape == (4, 4)
    for row, sentence in zip(tokens, sentences):
        words = sentence.split()
        assert [t.decode("utf-8") for t in row[: len(words)]] == words
        assert all(t == b"" for t in row[len(words):])
    assert sentences_to_tokens(tf.zeros([0], tf.string)).shape == (0, 0)


def test_token_ids_equal_token_batcher(tmp_path):
    vocab = write_vocab(tmp_path, ["The", "cat", ".", "a", "b", "中文"])
    table = token_vocab_table(vocab)
    ids = batch_token_ids(_pad(MIXED), table)
    np.testing.assert_array_equal(ids.numpy(), TokenBatcher(vocab).batch_sentences(MIXED))
    # Unknown tokens map to <UNK> (id 2, shifted to 3).
    assert batch_token_ids(tf.constant([["zzz"]]), table).numpy()[0, 1] == 3
    explicit = batch_token_ids(tf.constant([["a", "b", "a"]]), table, sequence_len=tf.constant([2]))
    np.testing.assert_array_equal(explicit.numpy(), [[1, 7, 8, 2, 0]])


def test_token_ids_without_unk_name_the_unknown_token(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("<S>\n</S>\ncat\n", encoding="utf-8")
    table = token_vocab_table(str(path))
    # Padding after the row's end is not looked up.
    np.testing.assert_array_equal(batch_token_ids(tf.constant([["cat", ""]]), table).numpy(), [[1, 3, 2, 0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="dog"):
        batch_token_ids(tf.constant([["cat", "dog"]]), table)


def test_token_vocab_needs_boundaries(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("<UNK>\ncat\n", encoding="utf-8")
    with pytest.raises(ValueError, match="<S>, </S>"):
        token_vocab_table(str(path))


@pytest.mark.parametrize("call, error, message", [
    (lambda: batch_char_ids(tf.constant([[1, 2]]), 5), TypeError, "string tensor"),
    (lambda: batch_char_ids(tf.constant(["a", "b"]), 5), ValueError, "rank 2"),
    (lambda: batch_char_ids(tf.constant([[["a"]]]), 5), ValueError, "rank 2"),
    (lambda: batch_char_ids("The cat", 5), TypeError, "single str"),
    (lambda: batch_char_ids(tf.constant([["a"]]), 2), ValueError, "at least 3"),
    (lambda: batch_char_ids(tf.constant([["a"]]), 5, sequence_len=tf.constant([1.0])), TypeError, "integers"),
    (lambda: sentences_to_tokens(tf.constant([["a b"]])), ValueError, "rank 1"),
    (lambda: sentences_to_tokens(tf.constant([1.0])), TypeError, "tf.string"),
])
def test_bad_input_is_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
