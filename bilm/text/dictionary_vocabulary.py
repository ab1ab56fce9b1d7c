"""A training vocabulary read through a model's own dictionaries (ELMoForManyLangs' models, adapted)."""
import numpy as np

from bilm.text.dictionary_ids import DictionaryBatcher
from bilm.text.vocabulary import UnicodeCharsVocabulary, Vocabulary


class DictionaryCharsVocabulary(UnicodeCharsVocabulary):
    """A `UnicodeCharsVocabulary` whose id rows come from a model's dictionaries, not UTF-8 bytes.

    A token's row is what `bilm.text.dictionary_ids.DictionaryBatcher`
    gives it, unshifted: C character ids, then the word's id when the model
    has a word dictionary. The training vocabulary's `<S>` and `</S>` get
    the model's sentence start and end rows.

    Args:
        filename: the training vocabulary file.
        characters: `CharacterDictionary`.
        words: `WordDictionary`, or None.
        max_characters: C, the model's `max_characters_per_token`.
        validate_file: as for `Vocabulary`.

    Attributes:
        word_char_ids: np.int32 `(size, max_word_length)`.
        max_word_length: the row's width, C or C + 1 (the model's
            `token_id_width`).
    """

    def __init__(self, filename, characters, words, max_characters, validate_file=False):
        Vocabulary.__init__(self, filename, validate_file=validate_file)
        self._batcher = DictionaryBatcher(characters, words, max_characters)
        start, end = characters.boundary_tokens
        self.bos_chars = self._batcher.boundary_rows[start]
        self.eos_chars = self._batcher.boundary_rows[end]
        self._max_word_length = len(self.bos_chars)
        rows = [self._batcher.token_row(token) for token in self._id_to_word]
        self._word_char_ids = np.stack(rows).astype(np.int32) if rows else np.zeros(
            (0, self._max_word_length), np.int32)
        if self._bos != -1:
            self._word_char_ids[self._bos] = self.bos_chars
        if self._eos != -1:
            self._word_char_ids[self._eos] = self.eos_chars

    def _token_char_ids(self, token):
        return self._batcher.token_row(token)
