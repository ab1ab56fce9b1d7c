"""Token ids from a model's own dictionaries in the TensorFlow graph: `bilm.text.dictionary_ids`'s rows,
for string tokens (`ELMoEmbedding`'s text inputs, the SavedModel)."""
import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf

from bilm.text.dictionary_ids import DictionaryBatcher
from bilm.text.graph_batching import frame_rows, token_lengths


@dataclasses.dataclass
class DictionaryTables:
    """A model's dictionaries as in-graph lookup tables (see `dictionary_tables`).

    Attributes:
        characters: `tf.lookup.StaticHashTable` code point (int64) -> id,
            `unknown` for the others.
        words: `tf.lookup.StaticHashTable` UTF-8 word -> id, or None.
        batcher: the `DictionaryBatcher` of the same dictionaries (its rows
            of the boundary tokens are the graph's too).
    """

    characters: tf.lookup.StaticHashTable
    words: Optional[tf.lookup.StaticHashTable]
    batcher: DictionaryBatcher

    @property
    def tables(self):
        """The lookup tables, for a `tf.Module` that must own them."""
        return [table for table in (self.characters, self.words) if table is not None]


def dictionary_tables(characters, words, max_characters):
    """`DictionaryTables` of a `CharacterDictionary`, a `WordDictionary` (or None) and C."""
    singles = {ord(char): i for char, i in characters.ids.items() if len(char) == 1}
    char_table = _table(np.fromiter(singles, np.int64, len(singles)), list(singles.values()), characters.unknown,
                        tf.int64)
    word_table = None
    if words is not None:
        keys = [word.encode("utf-8", "surrogateescape") for word in words.ids]
        word_table = _table(keys, list(words.ids.values()), words.unknown, tf.string)
    return DictionaryTables(char_table, word_table, DictionaryBatcher(characters, words, max_characters))


def _table(keys, values, default, key_dtype):
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, key_dtype), tf.constant(values, tf.int32)),
        default_value=default)


def batch_dictionary_ids(tokens, tables, sequence_len=None):
    """Dictionary ids of a batch of tokens, in graph; equals `DictionaryBatcher.batch_sentences`.

    Args:
        tokens: string `(batch, time)`, `''` = padding (row lengths as in
            `bilm.text.graph_batching.token_lengths`).
        tables: `DictionaryTables`.
        sequence_len: optional int `(batch,)` tokens per row.

    Returns:
        int32 `(batch, time + 2, width)`: each row's boundary tokens and
        tokens (ids + 1), then all-zero tokens.
    """
    batcher = tables.batcher
    c, n_chars = batcher.characters, batcher.max_characters - 2
    lengths = token_lengths(tokens, sequence_len)
    tokens = tf.convert_to_tensor(tokens)
    shape = tf.shape(tokens)
    # Each token's first n_chars code points, as (batch * time, None), then dense with -1 past its end.
    codes = tf.strings.unicode_decode(tf.reshape(tokens, [-1]), "UTF-8", errors="replace")[:, :n_chars]
    cut = tf.reshape(tf.strings.unicode_encode(codes, "UTF-8"), shape)
    dense = tf.reshape(codes.to_tensor(default_value=-1, shape=[None, n_chars]), tf.concat([shape, [n_chars]], 0))
    count = tf.reduce_sum(tf.cast(dense >= 0, tf.int32), axis=-1, keepdims=True)
    char_ids = tables.characters.lookup(tf.cast(dense, tf.int64))
    char_ids = tf.concat([char_ids, tf.zeros_like(char_ids[..., :1])], axis=-1)
    position = tf.range(n_chars + 1)
    body = tf.where(position < count, char_ids, tf.where(position == count, c.end_of_word, c.padding))
    rows = tf.concat([tf.fill(tf.shape(count), c.begin_of_word), body], axis=-1)
    if tables.words is not None:
        rows = tf.concat([rows, tables.words.lookup(cut)[..., tf.newaxis]], axis=-1)
    for token, row in batcher.boundary_rows.items():
        rows = tf.where(tf.equal(cut, token)[..., tf.newaxis], tf.constant(row), rows)
    start, end = c.boundary_tokens
    return frame_rows(rows, lengths, tf.constant(batcher.boundary_rows[start]), tf.constant(batcher.boundary_rows[end]))
