"""Text to biLM ids inside the TensorFlow graph, so that a SavedModel takes text.

The ops here reproduce `bilm.text.batching.Batcher` and `TokenBatcher` with
`tf.strings` byte operations only (no Python per token):

- `sentences_to_tokens`: `(batch,)` raw sentences -> `(batch, time)` tokens,
  split on whitespace and padded with `''` (like the TF-Hub ELMo module's
  `default` signature).
- `batch_char_ids`: `(batch, time)` tokens -> `(batch, time + 2, C)`
  character ids, equal to `Batcher.batch_sentences`.
- `token_vocab_table` + `batch_token_ids`: `(batch, time)` tokens ->
  `(batch, time + 2)` token ids, equal to `TokenBatcher.batch_sentences`.

Row lengths: a row's tokens are those before its first `''`; whatever
follows the first `''` is padding and ignored (`Batcher` never sees it).
Passing `sequence_len` instead takes the first `sequence_len[b]` tokens of
row b as they are (an empty token inside the length is then a real, empty
token, as `Batcher` encodes `''`), like the TF-Hub `tokens` signature.
"""
import dataclasses
import os

import numpy as np
import tensorflow as tf

from bilm.errors import UserError
from bilm.text.vocabulary import (
    BOS_CHAR,
    BOS_TOKEN,
    BOUNDARY_TOKENS,
    BOW_CHAR,
    EOS_CHAR,
    EOS_TOKEN,
    EOW_CHAR,
    PAD_CHAR,
    UNK_TOKEN,
    Vocabulary,
    boundary_char_ids,
)
from bilm.text.whitespace import split_tokens_in_graph


def _check_strings(x, rank, name, example):
    """`x` as a string tensor of the given rank; TypeError / ValueError otherwise."""
    if isinstance(x, (str, bytes)):
        raise TypeError(
            f"{name} must be a string tensor of rank {rank}, e.g. {example}. "
            f"Received a single {type(x).__name__}: {x[:50]!r}")
    if not isinstance(x, tf.Tensor):
        try:
            x = tf.convert_to_tensor(x)
        except (TypeError, ValueError) as error:
            raise TypeError(f"{name} must be a string tensor of rank {rank}, e.g. {example}. "
                            f"Received: {error}") from None
    if x.dtype != tf.string:
        raise TypeError(
            f"{name} must be a string tensor (dtype tf.string), e.g. {example}. "
            f"Received dtype {x.dtype.name} with shape {tuple(x.shape)}.")
    if x.shape.rank != rank:
        raise UserError(
            f"{name} must have rank {rank}, e.g. {example}. Received shape {tuple(x.shape)}.")
    return x


def _check_sequence_len(sequence_len, tokens):
    """int32 `(batch,)` lengths clipped to [0, time]; None stays None."""
    if sequence_len is None:
        return None
    sequence_len = tf.convert_to_tensor(sequence_len)
    if not sequence_len.dtype.is_integer:
        raise TypeError(f"sequence_len must be integers, shape (batch,). Received dtype {sequence_len.dtype.name}.")
    if sequence_len.shape.rank != 1:
        raise UserError(f"sequence_len must have shape (batch,). Received shape {tuple(sequence_len.shape)}.")
    time = tf.shape(tokens)[1]
    return tf.clip_by_value(tf.cast(sequence_len, tf.int32), 0, time)


def token_lengths(tokens, sequence_len=None):
    """Real tokens per row: `(batch, time)` string -> int32 `(batch,)`.

    Without `sequence_len`, the number of tokens before the row's first
    `''`; with it, `sequence_len` clipped to `[0, time]`.
    """
    tokens = _check_strings(tokens, 2, "tokens", "[['The', 'cat', ''], ['Hi', '', '']]")
    if sequence_len is not None:
        return _check_sequence_len(sequence_len, tokens)
    # cumprod of "not empty" is 1 up to the first '' and 0 from there on.
    present = tf.cast(tf.not_equal(tokens, ""), tf.int32)
    return tf.reduce_sum(tf.math.cumprod(present, axis=1), axis=1)


def sentences_to_tokens(sentences):
    """Splits raw sentences into tokens (the rule of `bilm.text.whitespace`).

    Args:
        sentences: string `(batch,)`, e.g. `["The cat sat .", "Hi"]`.

    Returns:
        string `(batch, time)` with `time` the most tokens of any sentence,
        padded with `''`.
    """
    sentences = _check_strings(sentences, 1, "sentences", "['The cat sat .', 'Hi']")
    return split_tokens_in_graph(sentences).to_tensor(default_value="")


def _framed_token_char_ids(tokens, max_chars):
    """`(batch, time)` tokens -> unshifted `(batch, time, max_chars)` ids.

    UTF-8 bytes truncated to `max_chars - 2` bytes (possibly inside a
    multi-byte character, as `Batcher` does), framed by 258/259, padded 260.
    """
    n_bytes = max_chars - 2
    truncated = tf.strings.substr(tokens, 0, n_bytes, unit="BYTE")
    lengths = tf.strings.length(truncated, unit="BYTE")
    # Pad every token to exactly n_bytes bytes so that decode_raw gives a
    # dense (batch, time, n_bytes) array; the filler bytes are masked below.
    filler = tf.strings.substr(
        tf.fill(tf.shape(tokens), "\0" * n_bytes), tf.zeros_like(lengths), n_bytes - lengths, unit="BYTE")
    raw = tf.io.decode_raw(tf.strings.join([truncated, filler]), tf.uint8)
    raw = tf.reshape(tf.cast(raw, tf.int32), tf.concat([tf.shape(tokens), [n_bytes]], axis=0))
    # Positions 1 .. n_bytes + 1 of the row: bytes, then EOW, then PAD.
    raw = tf.concat([raw, tf.zeros_like(raw[..., :1])], axis=-1)
    position = tf.range(n_bytes + 1)
    length = lengths[..., tf.newaxis]
    body = tf.where(position < length, raw, tf.where(position == length, EOW_CHAR, PAD_CHAR))
    bow = tf.fill(tf.concat([tf.shape(tokens), [1]], axis=0), BOW_CHAR)
    return tf.concat([bow, body], axis=-1)


def frame_rows(token_rows, lengths, bos, eos):
    """Adds `<S>`/`</S>` around each row's first `lengths[b]` entries, +1 shift, 0 padding.

    Args:
        token_rows: unshifted int32 `(batch, time, ...)`.
        lengths: int32 `(batch,)`.
        bos, eos: int32 tensors of shape `token_rows.shape[2:]`.

    Returns:
        int32 `(batch, time + 2, ...)`: row b is `<S>`, its tokens, `</S>`
        (all +1), then zeros.
    """
    extra_dims = token_rows.shape.rank - 2
    batch = tf.shape(token_rows)[0]
    padded = tf.pad(token_rows + 1, [[0, 0], [1, 1]] + [[0, 0]] * extra_dims)
    position = tf.range(tf.shape(padded)[1])[tf.newaxis, :]
    length = lengths[:, tf.newaxis]
    expand = tf.ones([extra_dims], tf.int32)

    def select(condition):
        return tf.reshape(condition, tf.concat([[batch, -1], expand], axis=0))

    ids = tf.where(select((position >= 1) & (position <= length)), padded, 0)
    ids = tf.where(select(tf.broadcast_to(position == 0, tf.shape(position + length))), bos + 1, ids)
    return tf.where(select(position == length + 1), eos + 1, ids)


def batch_char_ids(tokens, max_chars, sequence_len=None):
    """Character ids of a batch of tokens, in graph; equals `Batcher`'s output.

    Args:
        tokens: string `(batch, time)`, `''` = padding (see the module
            docstring for how row lengths are found). Tokens are bytes; a
            Python `str` is UTF-8 encoded by `tf.constant`.
        max_chars: `max_characters_per_token` of the model (>= 3).
        sequence_len: optional int `(batch,)` tokens per row.

    Returns:
        int32 `(batch, time + 2, max_chars)`: row b holds `<S>`, its tokens
        and `</S>` (ids shifted +1, so 1-261), then all-zero tokens. When the
        longest row fills `time` this is exactly
        `Batcher(None, max_chars).batch_sentences(rows)`.
    """
    bos = boundary_char_ids(BOS_CHAR, max_chars)  # checks max_chars >= 3
    eos = boundary_char_ids(EOS_CHAR, max_chars)
    lengths = token_lengths(tokens, sequence_len)
    rows = _framed_token_char_ids(tf.convert_to_tensor(tokens), len(bos))
    return frame_rows(rows, lengths, tf.constant(bos), tf.constant(eos))


@dataclasses.dataclass
class TokenVocabTable:
    """A vocabulary file as an in-graph lookup table (see `token_vocab_table`).

    Attributes:
        table: `tf.lookup.StaticHashTable` token (bytes) -> unshifted id;
            unknown tokens give `<UNK>`'s id, or -1 when the file has none.
        bos, eos, unk: ids of `<S>`, `</S>`, `<UNK>` (-1 for a missing `<UNK>`).
        filename: the vocabulary file (or what the vocabulary came from).
    """

    table: tf.lookup.StaticHashTable
    bos: int
    eos: int
    unk: int
    filename: str


def token_vocab_table(vocabulary):
    """A vocabulary as an in-graph lookup table.

    Args:
        vocabulary: a vocabulary file's path (read as
            `bilm.text.vocabulary.Vocabulary` reads it), or its tokens in
            file order (a token's id is its position).

    Raises:
        ValueError: the vocabulary lacks `<S>` or `</S>` (as `TokenBatcher`).
    """
    if isinstance(vocabulary, (str, os.PathLike)):
        return token_vocab_table_of(vocabulary_tokens(vocabulary), os.fspath(vocabulary))
    return token_vocab_table_of(list(vocabulary), "the vocabulary")


def vocabulary_tokens(vocab_file):
    """The tokens of a vocabulary file, in file order (`Vocabulary`'s ids)."""
    vocab = Vocabulary(vocab_file)
    vocab.require(BOUNDARY_TOKENS, "a token-input biLM")
    return [vocab.id_to_word(i) for i in range(vocab.size)]


def token_vocab_table_of(tokens, source):
    """`TokenVocabTable` of `tokens` (ids = positions; a token listed twice
    keeps its last id, as `Vocabulary.word_to_id` does); `source` names it."""
    ids = {word: i for i, word in enumerate(tokens)}
    missing = [token for token in BOUNDARY_TOKENS if token not in ids]
    if missing:
        raise UserError(f"{source} lacks {', '.join(missing)}, which a token-input biLM needs.")
    keys = [word.encode("utf-8", "surrogateescape") for word in ids]
    values = np.array(list(ids.values()), dtype=np.int32)
    unk = ids.get(UNK_TOKEN, -1)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.string), tf.constant(values)),
        default_value=unk)
    return TokenVocabTable(table, ids[BOS_TOKEN], ids[EOS_TOKEN], unk, source)


def batch_token_ids(tokens, vocab_table, sequence_len=None):
    """Token ids of a batch of tokens, in graph; equals `TokenBatcher`'s output.

    Args:
        tokens: string `(batch, time)`, `''` = padding.
        vocab_table: a `TokenVocabTable` from `token_vocab_table`.
        sequence_len: optional int `(batch,)` tokens per row.

    Returns:
        int32 `(batch, time + 2)`: `<S>`, the token ids, `</S>`, all +1,
        then zeros. Unknown tokens map to `<UNK>`.

    Raises:
        tf.errors.InvalidArgumentError: a real token is unknown and the
            vocabulary has no `<UNK>`.
    """
    lengths = token_lengths(tokens, sequence_len)
    tokens = tf.convert_to_tensor(tokens)
    ids = vocab_table.table.lookup(tokens)
    checks = []
    if vocab_table.unk == -1:
        real = tf.range(tf.shape(tokens)[1])[tf.newaxis, :] < lengths[:, tf.newaxis]
        unknown = tf.logical_and(real, ids < 0)
        checks.append(tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(unknown)),
            [f"Tokens not in vocabulary file {vocab_table.filename!r}, which has no <UNK> line "
             "(add <UNK> or the tokens):", tf.boolean_mask(tokens, unknown)], summarize=20))
    with tf.control_dependencies(checks):
        return frame_rows(ids, lengths, tf.constant(vocab_table.bos, tf.int32),
                           tf.constant(vocab_table.eos, tf.int32))
