"""Token ids from a model's own dictionaries (ELMoForManyLangs' models), in Python (the same in the
TensorFlow graph: `bilm.text.graph_dictionary_ids`).

Such a model reads a token through its character dictionary (Unicode
characters, not UTF-8 bytes) and, when it has a word embedding, its word
dictionary. A token becomes one row of `width` unshifted ids
(docs/formats.md, "Dictionary ids"), with C = `max_characters_per_token`:

- the token is cut to its first C - 2 characters;
- ids 0 .. C - 1: `begin_of_word`, the id of each character (`unknown`
  for one the dictionary lacks), `end_of_word`, then `padding` up to C; a
  cut token equal to one of the two `boundary_tokens` is the sentence
  boundary instead: `[begin_of_word, sentence_start (or sentence_end),
  end_of_word, padding, ...]`;
- id C (with a word dictionary): the cut token's id among the words,
  `unknown` when it is not listed.

Sentences are framed by the two boundary tokens' rows; as with byte ids,
the batchers add 1 to every id so that 0 can mean "no token".
"""
import dataclasses
from typing import Mapping, Tuple

import numpy as np

from bilm.text.batching import IdRowBatcher


@dataclasses.dataclass(frozen=True)
class CharacterDictionary:
    """A model's characters and the ids of its special positions.

    Attributes:
        ids: `{character: id}`; entries longer than one character (the
            dictionary's own names of its special ids) never match a
            character of a token.
        begin_of_word, end_of_word, padding, unknown: the ids framing and
            filling a token's row, and of a character not in `ids`.
        sentence_start, sentence_end: the ids between the frame of the two
            boundary rows.
        boundary_tokens: the tokens framing every sentence, `(start, end)`.
    """

    ids: Mapping[str, int]
    begin_of_word: int
    end_of_word: int
    padding: int
    unknown: int
    sentence_start: int
    sentence_end: int
    boundary_tokens: Tuple[str, str]

    @property
    def n_ids(self):
        """Rows of the character table: the largest id + 1."""
        return 1 + max((*self.ids.values(), self.begin_of_word, self.end_of_word, self.padding, self.unknown,
                        self.sentence_start, self.sentence_end))


@dataclasses.dataclass(frozen=True)
class WordDictionary:
    """A model's words: `{word: id}`, and the id of a word not listed."""

    ids: Mapping[str, int]
    unknown: int

    @property
    def n_ids(self):
        """Rows of the word table: the largest id + 1."""
        return 1 + max((*self.ids.values(), self.unknown))


def cut_token(token, max_characters):
    """The part of `token` a model reads: its first `max_characters - 2` characters (bytes decoded as UTF-8,
    invalid bytes as U+FFFD)."""
    if isinstance(token, bytes):
        token = token.decode("utf-8", "replace")
    elif not isinstance(token, str):
        raise TypeError(f"a token must be str or bytes, not {type(token).__name__}")
    return token[:max_characters - 2]


class DictionaryBatcher(IdRowBatcher):
    """Batches tokenized sentences into dictionary id rows (see the module docstring).

    `batch_sentences(sentences)` gives int32 `(n_sentences, max_len + 2,
    width)`: each row's boundary tokens and tokens, ids + 1, then zeros.

    Args:
        characters: `CharacterDictionary`.
        words: `WordDictionary`, or None for a model without a word embedding.
        max_characters: `max_characters_per_token` (C).
    """

    def __init__(self, characters, words, max_characters):
        self.characters, self.words, self.max_characters = characters, words, max_characters
        start, end = characters.boundary_tokens
        self.boundary_rows = {start: self._boundary_row(characters.sentence_start, start),
                            end: self._boundary_row(characters.sentence_end, end)}
        super().__init__(self.boundary_rows[start], self.boundary_rows[end], self.token_row)

    def _boundary_row(self, sentence_id, token):
        c = self.characters
        chars = [c.begin_of_word, sentence_id, c.end_of_word] + [c.padding] * (self.max_characters - 3)
        return np.asarray(chars + self._word_id(token), np.int32)

    def _word_id(self, cut):
        return [] if self.words is None else [self.words.ids.get(cut, self.words.unknown)]

    def token_row(self, token):
        """The unshifted id row of one token (a boundary token gives its boundary row)."""
        cut = cut_token(token, self.max_characters)
        if cut in self.boundary_rows:
            return self.boundary_rows[cut]
        c = self.characters
        chars = [c.begin_of_word, *(c.ids.get(char, c.unknown) for char in cut), c.end_of_word]
        chars += [c.padding] * (self.max_characters - len(chars))
        return np.asarray(chars + self._word_id(cut), np.int32)
