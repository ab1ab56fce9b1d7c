"""Token and character vocabularies of the biLM (bilm-tf's `bilm/data.py`).

A vocabulary file holds one token per line; the line number (after skipping
`!!!MAXTERMID`) is the token id. Training needs `<S>`, `</S>` and `<UNK>`.

Character ids are the token's UTF-8 bytes (0-255) truncated to
`max_characters_per_token - 2` bytes, framed by `BOW_CHAR` (258) and
`EOW_CHAR` (259) and right-padded with `PAD_CHAR` (260). The sentence
boundary tokens are `[258, 256, 259, 260, ...]` (`<S>`) and
`[258, 257, 259, 260, ...]` (`</S>`). All ids here are *unshifted*: the
batchers add 1 so that 0 can mean "no token".
"""
import hashlib
import os

import numpy as np

from bilm.errors import UserError
from bilm.text.vocabulary_file import read_vocabulary_file
from bilm.text.whitespace import split_tokens

BOS_CHAR = 256  # begin of sentence
EOS_CHAR = 257  # end of sentence
BOW_CHAR = 258  # begin of word
EOW_CHAR = 259  # end of word
PAD_CHAR = 260  # padding inside a token
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"
UNK_TOKEN = "<UNK>"
BOUNDARY_TOKENS = (BOS_TOKEN, EOS_TOKEN)
TRAINING_TOKENS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)


class UnknownTokenError(UserError, KeyError):
    """A token is not in the vocabulary and the vocabulary has no `<UNK>`."""

    def __str__(self):
        # KeyError quotes its argument; show the message as written.
        return str(self.args[0]) if self.args else ""


def _check_max_characters(max_characters_per_token):
    if int(max_characters_per_token) < 3:
        raise UserError(
            "max_characters_per_token must be at least 3 (begin-of-word, "
            "one byte, end-of-word). "
            f"Received: max_characters_per_token={max_characters_per_token}"
        )
    return int(max_characters_per_token)


def _token_bytes(token):
    """The bytes of a `str` or `bytes` token.

    A `str` is UTF-8 encoded. Lone surrogates U+DC80..U+DCFF (what
    `errors="surrogateescape"` decoding makes of invalid bytes) go back to
    their raw byte; any other unencodable character is dropped.
    """
    if isinstance(token, bytes):
        return token
    if not isinstance(token, str):
        raise TypeError(
            f"A token must be str or bytes. Received: {token!r} "
            f"of type {type(token).__name__}"
        )
    try:
        return token.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        out = bytearray()
        for char in token:
            code = ord(char)
            if 0xDC80 <= code <= 0xDCFF:
                out.append(code - 0xDC00)
            else:
                out += char.encode("utf-8", "ignore")
        return bytes(out)


def token_to_char_ids(token, max_characters_per_token):
    """Unshifted character ids of one token.

    Args:
        token: `str` (UTF-8 encoded, see `_token_bytes` for invalid text) or
            `bytes` (used as is).
        max_characters_per_token: row length, at least 3.

    Returns:
        np.int32 array of shape `(max_characters_per_token,)`:
        `[258, b_0, ..., b_{n-1}, 259, 260, ...]` with at most
        `max_characters_per_token - 2` bytes (truncated byte-wise, which may
        cut a multi-byte character). An empty token gives `[258, 259, 260...]`.
    """
    max_chars = _check_max_characters(max_characters_per_token)
    encoded = _token_bytes(token)[: max_chars - 2]
    row = np.full((max_chars,), PAD_CHAR, dtype=np.int32)
    row[0] = BOW_CHAR
    row[1 : len(encoded) + 1] = np.frombuffer(encoded, dtype=np.uint8)
    row[len(encoded) + 1] = EOW_CHAR
    return row


def tokens_to_char_ids(tokens, max_characters_per_token):
    """`token_to_char_ids` for many tokens at once (vectorised).

    Returns:
        np.int32 array of shape `(len(tokens), max_characters_per_token)`.
    """
    max_chars = _check_max_characters(max_characters_per_token)
    encoded = [_token_bytes(token)[: max_chars - 2] for token in tokens]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    table = np.full((len(encoded), max_chars), PAD_CHAR, dtype=np.int32)
    table[:, 0] = BOW_CHAR
    byte_positions = np.arange(max_chars - 2)[None, :] < lengths[:, None]
    table[:, 1 : max_chars - 1][byte_positions] = np.frombuffer(
        b"".join(encoded), dtype=np.uint8
    )
    table[np.arange(len(encoded)), lengths + 1] = EOW_CHAR
    return table


def boundary_char_ids(boundary_char, max_characters_per_token):
    """`[258, boundary_char, 259, 260, ...]`, shape `(max_characters_per_token,)`."""
    max_chars = _check_max_characters(max_characters_per_token)
    row = np.full((max_chars,), PAD_CHAR, dtype=np.int32)
    row[:3] = (BOW_CHAR, boundary_char, EOW_CHAR)
    return row


class Vocabulary:
    """Token vocabulary read from a file with one token per line.

    Lines are read as UTF-8 (invalid bytes kept through `surrogateescape`)
    and stripped of surrounding whitespace; a line `!!!MAXTERMID` is
    skipped. The id of a token is its line number among the kept lines.

    Args:
        filename: path of the vocabulary file.
        validate_file: check the file as a training vocabulary: it must have
            `<S>`, `</S>` and `<UNK>` as its first three tokens (in any
            order) and no token twice (`UserError` naming the file and lines
            otherwise).

    Example:
    >>> vocab = Vocabulary("vocab.txt")  # lines: <S> </S> <UNK> the cat
    >>> vocab.encode("the cat")
    array([0, 3, 4, 1], dtype=int32)
    """

    def __init__(self, filename, validate_file=False):
        self.filename = os.fspath(filename)
        lines = read_vocabulary_file(self.filename)
        self._id_to_word = lines.tokens
        # A repeated token keeps the later id, as in bilm-tf.
        self._word_to_id = {word: i for i, word in enumerate(lines.tokens)}
        # (token, its first line, a later line).
        self._repeated = lines.repeated
        self._bos = self._word_to_id.get(BOS_TOKEN, -1)
        self._eos = self._word_to_id.get(EOS_TOKEN, -1)
        self._unk = self._word_to_id.get(UNK_TOKEN, -1)
        if validate_file:
            self.check_training_layout()

    def check_training_layout(self):
        """Raises `UserError`, naming the file and lines, unless this is a training vocabulary.

        Training needs `<S>`, `</S>` and `<UNK>`, as the first three tokens:
        the sampled softmax draws its negatives assuming that ids rank the
        tokens by frequency. A token listed twice is an error (its first id
        could never be predicted).
        """
        self.require(TRAINING_TOKENS, "training")
        first = self._id_to_word[:len(TRAINING_TOKENS)]
        if set(first) != set(TRAINING_TOKENS):
            raise UserError(
                f"Vocabulary file {self.filename!r} starts with {', '.join(first)}; training needs <S>, </S> and "
                "<UNK> as the first three lines, then the tokens by descending frequency (bin/build_vocab.py "
                "writes such a file).")
        if self._repeated:
            token, first, again = self._repeated[0]
            more = f" ({len(self._repeated) - 1} more repeated tokens)" if len(self._repeated) > 1 else ""
            raise UserError(
                f"Vocabulary file {self.filename!r} lists {token!r} twice, on lines {first} and {again}{more}; "
                "each token must have one line (bin/build_vocab.py writes such a file).")

    @property
    def fingerprint(self):
        """A signed 64-bit hash of the tokens in id order: two vocabularies with the same fingerprint
        give every token the same id (what a checkpoint records of the vocabulary it was trained with)."""
        digest = hashlib.sha256("\n".join(self._id_to_word).encode("utf-8", "surrogateescape")).digest()
        return int.from_bytes(digest[:8], "little", signed=True)

    def require(self, tokens, purpose):
        """Raises ValueError, naming the file, if it lacks any of `tokens`
        (e.g. `BOUNDARY_TOKENS`), which `purpose` needs."""
        missing = [token for token in tokens if token not in self._word_to_id]
        if missing:
            raise UserError(
                f"Vocabulary file {self.filename!r} lacks {', '.join(missing)}. {purpose[:1].upper()}"
                f"{purpose[1:]} needs {' and '.join(tokens)}. Add each missing token on its own line "
                "(bin/build_vocab.py writes <S>, </S> and <UNK> at the top).")

    @property
    def bos(self):
        """Id of `<S>`, or -1 when the file has none."""
        return self._bos

    @property
    def eos(self):
        """Id of `</S>`, or -1 when the file has none."""
        return self._eos

    @property
    def unk(self):
        """Id of `<UNK>`, or -1 when the file has none."""
        return self._unk

    @property
    def size(self):
        """Number of tokens (lines other than `!!!MAXTERMID`)."""
        return len(self._id_to_word)

    def word_to_id(self, word):
        """Id of `word`; the `<UNK>` id for a token not in the file.

        Raises:
            UnknownTokenError (a `KeyError`): `word` is unknown and the file
                has no `<UNK>`.
        """
        word_id = self._word_to_id.get(word)
        if word_id is not None:
            return word_id
        if self._unk == -1:
            raise UnknownTokenError(
                f"Token {word!r} is not in vocabulary file {self.filename!r}, "
                "which has no <UNK> line to map unknown tokens to. Add a line "
                "<UNK> to the file, or add the token."
            )
        return self._unk

    def id_to_word(self, cur_id):
        """The token with id `cur_id` (0 <= cur_id < size)."""
        if not 0 <= cur_id < len(self._id_to_word):
            raise IndexError(
                f"Token id {cur_id} is out of range for vocabulary file "
                f"{self.filename!r} of {len(self._id_to_word)} tokens."
            )
        return self._id_to_word[cur_id]

    def decode(self, cur_ids):
        """The tokens of `cur_ids` joined by single spaces."""
        return " ".join(self.id_to_word(cur_id) for cur_id in cur_ids)

    def encode(self, sentence, reverse=False, split=True):
        """Token ids of a sentence framed by the boundary ids.

        Args:
            sentence: a string of whitespace-separated tokens (`split=True`)
                or a list of tokens (`split=False`).
            reverse: the sentence is already reversed (the backward stream):
                the frame becomes `[eos, ids..., bos]`. The tokens themselves
                keep the given order, as in bilm-tf.
            split: see `sentence`.

        Returns:
            np.int32 array of shape `(n_tokens + 2,)`: `[bos, ids..., eos]`.
        """
        self.require(BOUNDARY_TOKENS, "encoding sentences")
        tokens = split_tokens(sentence) if split else sentence
        word_ids = [self.word_to_id(token) for token in tokens]
        first, last = (self._eos, self._bos) if reverse else (self._bos, self._eos)
        return np.array([first] + word_ids + [last], dtype=np.int32)


class UnicodeCharsVocabulary(Vocabulary):
    """A `Vocabulary` that also maps tokens to character ids.

    The character ids of every vocabulary token are precomputed in
    `word_char_ids`; `<S>` and `</S>` get the sentence boundary rows. Ids are
    unshifted (0-260, see the module docstring).

    Args:
        filename: path of the vocabulary file.
        max_word_length: characters per token, at least 3 (50 for the
            published models).
        validate_file: as for `Vocabulary`.

    Attributes:
        word_char_ids: np.int32 `(size, max_word_length)`.
        bos_chars, eos_chars: np.int32 `(max_word_length,)` boundary rows.
    """

    bos_char = BOS_CHAR
    eos_char = EOS_CHAR
    bow_char = BOW_CHAR
    eow_char = EOW_CHAR
    pad_char = PAD_CHAR

    def __init__(self, filename, max_word_length, validate_file=False):
        super().__init__(filename, validate_file=validate_file)
        self._max_word_length = _check_max_characters(max_word_length)
        self.bos_chars = boundary_char_ids(BOS_CHAR, self._max_word_length)
        self.eos_chars = boundary_char_ids(EOS_CHAR, self._max_word_length)
        self._word_char_ids = tokens_to_char_ids(self._id_to_word, self._max_word_length)
        # Unlike bilm-tf, do not write the boundary rows at index -1 (the
        # last token) when the file lacks <S> or </S>.
        if self._bos != -1:
            self._word_char_ids[self._bos] = self.bos_chars
        if self._eos != -1:
            self._word_char_ids[self._eos] = self.eos_chars

    @property
    def word_char_ids(self):
        """np.int32 `(size, max_word_length)`: char ids of every token."""
        return self._word_char_ids

    @property
    def max_word_length(self):
        return self._max_word_length

    def word_to_char_ids(self, word):
        """Char ids of one token, shape `(max_word_length,)`.

        Tokens of the file come from `word_char_ids` (do not modify the
        returned row); `<S>` and `</S>` always give the boundary rows; any
        other token is converted with `token_to_char_ids`.
        """
        if isinstance(word, str):
            word_id = self._word_to_id.get(word)
            if word_id is not None:
                return self._word_char_ids[word_id]
            if word == BOS_TOKEN:
                return self.bos_chars
            if word == EOS_TOKEN:
                return self.eos_chars
        return self._token_char_ids(word)

    def _token_char_ids(self, token):
        """The row of a token that is not in the file (nor `<S>`, `</S>`)."""
        return token_to_char_ids(token, self._max_word_length)

    def encode_chars(self, sentence, reverse=False, split=True):
        """Char ids of a sentence framed by the boundary rows.

        Args:
            sentence, reverse, split: as for `Vocabulary.encode` (with
                `reverse` the frame is `[eos_chars, ..., bos_chars]`).

        Returns:
            np.int32 array of shape `(n_tokens + 2, max_word_length)`.
        """
        tokens = split_tokens(sentence) if split else sentence
        rows = [self.word_to_char_ids(token) for token in tokens]
        first, last = (
            (self.eos_chars, self.bos_chars) if reverse else (self.bos_chars, self.eos_chars)
        )
        return np.vstack([first] + rows + [last]).astype(np.int32, copy=False)
