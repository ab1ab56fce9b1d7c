"""Batch tokenized sentences into the biLM's padded id arrays.

Both batchers frame each sentence with `<S>` ... `</S>`, add 1 to every id so
that 0 can mean "no token", and pad the sentences to the longest one with 0.
"""
import functools

import numpy as np

from bilm.errors import UserError
from bilm.text.vocabulary import (
    BOS_CHAR,
    BOS_TOKEN,
    BOUNDARY_TOKENS,
    EOS_CHAR,
    EOS_TOKEN,
    UnicodeCharsVocabulary,
    Vocabulary,
    boundary_char_ids,
    token_to_char_ids,
)

# Character ids of tokens seen by a `Batcher` are kept for reuse.
_CHAR_IDS_CACHE_SIZE = 100_000


def _check_sentences(sentences):
    """A list of the sentences, each a list of tokens; TypeError otherwise."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(
            "sentences must be a list of sentences, each a list of tokens, "
            f"e.g. [['The', 'cat', '.']]. Received a {type(sentences).__name__}: "
            f"{sentences[:50]!r}"
        )
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"sentences[{index}] is a {type(sentence).__name__} "
                f"({sentence[:50]!r}); each sentence must be a list of tokens, "
                "e.g. 'The cat .'.split()."
            )
    return sentences


def _fill_padded(values, lengths, shape, dtype):
    """Zero array of `shape` with `values` laid row by row in the first
    `lengths[k]` positions of row k. `values`: `(sum(lengths), *shape[2:])`."""
    out = np.zeros(shape, dtype=dtype)
    valid = np.arange(shape[1])[None, :] < np.asarray(lengths)[:, None]
    out[valid] = values
    return out


class IdRowBatcher:
    """Batches tokenized sentences into one row of ids per token, given each token's row.

    The rows of a token depend only on the token, so they are computed once
    per distinct token and kept. `Batcher` (UTF-8 byte ids) and
    `bilm.text.dictionary_ids.DictionaryBatcher` (a model's own
    dictionaries) are the two ways a token gets its row.

    Args:
        bos_row, eos_row: int32 `(width,)` unshifted rows of `<S>` and `</S>`.
        token_row: token (`str` or `bytes`) -> its unshifted int32 `(width,)` row.
    """

    def __init__(self, bos_row, eos_row, token_row):
        self._bos_chars, self._eos_chars = bos_row, eos_row
        self._max_token_length = len(bos_row)
        self._char_ids = functools.lru_cache(maxsize=_CHAR_IDS_CACHE_SIZE)(token_row)

    def _token_char_ids(self, token, sentence_index):
        try:
            return self._char_ids(token)
        except TypeError as error:
            raise TypeError(
                f"sentences[{sentence_index}] has a token that is not str or "
                f"bytes ({error})."
            ) from None

    def batch_sentences(self, sentences):
        """The ids of a batch, shifted by +1 and zero padded.

        Args:
            sentences: list of sentences, each a list of tokens (`str` or
                `bytes`) without `<S>` / `</S>`, e.g.
                `[["The", "cat", "."], ["Hi"]]`.

        Returns:
            np.int32 array of shape `(n_sentences, max_len + 2, width)`,
            max_len being the longest sentence's length. Row k holds `<S>`,
            the tokens and `</S>` (ids + 1), then all-zero tokens.

        Raises:
            TypeError: `sentences` or one sentence is a string.
        """
        sentences = _check_sentences(sentences)
        lengths = [len(sentence) + 2 for sentence in sentences]
        rows = []
        for index, sentence in enumerate(sentences):
            rows.append(self._bos_chars)
            rows.extend(self._token_char_ids(token, index) for token in sentence)
            rows.append(self._eos_chars)
        shape = (len(sentences), max(lengths, default=2), self._max_token_length)
        if not rows:
            return np.zeros(shape, dtype=np.int32)
        return _fill_padded(np.stack(rows) + 1, lengths, shape, np.int32)


class Batcher(IdRowBatcher):
    """Batches tokenized sentences into character ids for the biLM.

    The character ids of a token depend only on the token (see
    `bilm.text.vocabulary.token_to_char_ids`); the vocabulary file serves as a
    precomputed table and may lack `<S>`, `</S>` and `<UNK>`. The tokens
    `<S>` and `</S>` inside a sentence map to the boundary rows.
    `batch_sentences` gives `(n_sentences, max_len + 2, max_token_length)`
    ids 1-261 (see `IdRowBatcher.batch_sentences`).

    Args:
        lm_vocab_file: vocabulary file (one token per line), or None.
        max_token_length: characters per token (`max_characters_per_token`
            of the model's options, 50 for the published models).

    Example:
    >>> batcher = Batcher("vocab.txt", 50)
    >>> batcher.batch_sentences([["The", "cat", "."], ["Hi"]]).shape
    (2, 5, 50)
    """

    def __init__(self, lm_vocab_file, max_token_length):
        # boundary_char_ids checks max_token_length (>= 3).
        bos_row = boundary_char_ids(BOS_CHAR, max_token_length)
        eos_row = boundary_char_ids(EOS_CHAR, max_token_length)
        if lm_vocab_file is None:
            self._lm_vocab = None
            lookup = self._char_ids_without_vocab
        else:
            self._lm_vocab = UnicodeCharsVocabulary(lm_vocab_file, len(bos_row))
            lookup = self._lm_vocab.word_to_char_ids
        super().__init__(bos_row, eos_row, lookup)

    def _char_ids_without_vocab(self, token):
        if isinstance(token, str) and token == BOS_TOKEN:
            return self._bos_chars
        if isinstance(token, str) and token == EOS_TOKEN:
            return self._eos_chars
        return token_to_char_ids(token, self._max_token_length)


class TokenBatcher:
    """Batches tokenized sentences into token ids for a token-input biLM.

    Args:
        lm_vocab_file: vocabulary file with `<S>` and `</S>` (and `<UNK>`
            for sentences with tokens outside it).

    Raises:
        ValueError: the file lacks `<S>` or `</S>`.
    """

    def __init__(self, lm_vocab_file):
        self._lm_vocab = Vocabulary(lm_vocab_file)
        self._lm_vocab.require(BOUNDARY_TOKENS, "TokenBatcher")

    def batch_sentences(self, sentences):
        """Token ids of a batch, shifted by +1 and zero padded.

        Args:
            sentences: list of sentences, each a list of tokens without
                `<S>` / `</S>`.

        Returns:
            np.int32 array of shape `(n_sentences, max_len + 2)`: row k is
            `vocab.encode(sentence) + 1` followed by zeros.

        Raises:
            TypeError: `sentences` or one sentence is a string.
            bilm.text.vocabulary.UnknownTokenError: a token is not in the file and
                the file has no `<UNK>`.
        """
        sentences = _check_sentences(sentences)
        lengths = [len(sentence) + 2 for sentence in sentences]
        shape = (len(sentences), max(lengths, default=2))
        if not sentences:
            return np.zeros(shape, dtype=np.int32)
        ids = np.concatenate([self._lm_vocab.encode(s, split=False) for s in sentences])
        return _fill_padded(ids + 1, lengths, shape, np.int32)


def check_id_shape(shape, max_characters_per_token=None, who="ids"):
    """Checks the shape of a batch of biLM ids as the batchers make them.

    Args:
        shape: the ids' shape (`None` for unknown sizes).
        max_characters_per_token: C for char ids `(batch, time + 2, C)`
            from `Batcher`; None for token ids `(batch, time + 2)` from
            `TokenBatcher`.
        who: what the message starts with.

    Raises:
        ValueError: another rank or C, or fewer than the two boundaries.
    """
    shape = tuple(shape)
    if max_characters_per_token is None:
        expected, batcher, ok = "(batch, time + 2)", "TokenBatcher", len(shape) == 2
    else:
        expected, batcher = f"(batch, time + 2, {max_characters_per_token})", "Batcher"
        ok = len(shape) == 3 and shape[2] in (None, max_characters_per_token)
    if not ok:
        raise UserError(f"{who} must have shape {expected} as {batcher} gives them. Received shape {shape}.")
    if shape[1] is not None and shape[1] < 2:
        raise UserError(f"{who} must include the <S> and </S> boundary tokens (time >= 2), as {batcher} "
                         f"gives them. Received shape {shape}.")
