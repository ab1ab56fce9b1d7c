"""A model's own dictionaries as ids (bilm.text.dictionary_ids): the rules, the same in Python and in the graph."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.text.dictionary_ids import CharacterDictionary, DictionaryBatcher, WordDictionary
from bilm.text.graph_dictionary_ids import batch_dictionary_ids, dictionary_tables

CHARACTERS = CharacterDictionary(ids={"a": 0, "b": 1, "中": 2, "<x>": 3, "\u3000": 10}, begin_of_word=4,
                                 end_of_word=5, padding=6, unknown=7, sentence_start=8, sentence_end=9,
                                 boundary_tokens=("<bos>", "<eos>"))
WORDS = WordDictionary({"ab": 0, "<bos>": 1, "ababa": 2}, unknown=3)
BOS = [4, 8, 5, 6, 6, 6, 6]
EOS = [4, 9, 5, 6, 6, 6, 6]


def test_rows_follow_the_rules():
    sentences = [["ab", "中z", "abababab", "<bos>", ""], ["<eos>"]]
    ids = DictionaryBatcher(CHARACTERS, WORDS, 7).batch_sentences(sentences)
    assert ids.shape == (2, 7, 8)
    expected = [[*BOS, 1], [4, 0, 1, 5, 6, 6, 6, 0], [4, 2, 7, 5, 6, 6, 6, 3],
                # cut to 5 characters, and then a known word
                [4, 0, 1, 0, 1, 0, 5, 2],
                # a token spelled as a boundary is that boundary; '<bos>' is also a word here
                [*BOS, 1], [4, 5, 6, 6, 6, 6, 6, 3], [*EOS, 3]]
    np.testing.assert_array_equal(ids[0] - 1, expected)
    np.testing.assert_array_equal(ids[1, :3] - 1, [[*BOS, 1], [*EOS, 3], [*EOS, 3]])
    np.testing.assert_array_equal(ids[1, 3:], 0)
    # Cut first: with 4 characters '<bos>' is '<bos', read character by character; and a multi-character
    # entry ('<x>') never matches a character.
    short = DictionaryBatcher(CHARACTERS, WORDS, 6).batch_sentences([["<bos>", "<x>"]])
    np.testing.assert_array_equal(short[0, 1:3] - 1, [[4, 7, 1, 7, 7, 5, 3], [4, 7, 7, 7, 5, 6, 3]])
    assert CHARACTERS.n_ids == 11 and WORDS.n_ids == 4


@pytest.mark.parametrize("words", [WORDS, None])
def test_the_graph_gives_the_python_rows(words):
    sentences = [["ab", "naïve", "中中中中中中中", "🙂b", "<eos>", "abababab"], ["\u3000", "b\xe9"], ["<bos>"]]
    batcher = DictionaryBatcher(CHARACTERS, words, 7)
    tables = dictionary_tables(CHARACTERS, words, 7)
    tokens = tf.ragged.constant(sentences).to_tensor(default_value="")
    np.testing.assert_array_equal(batch_dictionary_ids(tokens, tables).numpy(), batcher.batch_sentences(sentences))
    with_empty = batch_dictionary_ids(tf.constant([["a", "", "b"]]), tables, sequence_len=tf.constant([3]))
    np.testing.assert_array_equal(with_empty.numpy(), batcher.batch_sentences([["a", "", "b"]]))
    assert batcher.batch_sentences([[b"\xffab"]]).tolist() == batcher.batch_sentences([["\ufffdab"]]).tolist()
