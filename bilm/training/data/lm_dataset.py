"""Training data of the biLM: sharded text cut into fixed windows (bilm-tf's `LMDataset`).

A corpus is a set of shard files matched by a glob, one sentence per line,
tokens separated by whitespace. Shards are read one at a time, so the corpus
never has to fit in memory (one shard does, with `shuffle_on_load`).

Each of the `batch_size` rows of a batch reads its own running stream of
sentences, each framed `<S> ... </S>`. A row fills its `num_steps` window
with as much of its current sentence as fits and keeps the rest for the same
row of the next batch, so a long sentence simply spans several windows and
the LSTM state of a row can carry from one batch to the next. The target of
each position is the next token of the stream. The backward stream holds
sentences with their tokens reversed, framed `</S> ... <S>`; in training it
reads the corpus in its own shuffled order, as bilm-tf's did.
"""
import copy
import itertools
import warnings

import numpy as np

from bilm.errors import UserError
from bilm.options import load_options
from bilm.options.keys import option_key
from bilm.text.dictionary_vocabulary import DictionaryCharsVocabulary
from bilm.text.vocabulary import TRAINING_TOKENS, UNK_TOKEN, UnicodeCharsVocabulary, Vocabulary
from bilm.text.whitespace import split_tokens
from bilm.training.data.shards import has_sentences, list_shards, read_lines

REVERSE_SUFFIX = "_reverse"


def load_vocab(vocab_file, max_word_length=None):
    """The training vocabulary (bilm-tf's `bilm.training.load_vocab`).

    Returns a `UnicodeCharsVocabulary` when `max_word_length` is given (the
    char-CNN model), otherwise a `Vocabulary`. Both must hold `<S>`, `</S>`
    and `<UNK>` (ValueError otherwise).
    """
    if max_word_length:
        return UnicodeCharsVocabulary(vocab_file, max_word_length, validate_file=True)
    return Vocabulary(vocab_file, validate_file=True)


def vocabulary_for(options, vocab_file):
    """The training vocabulary that reads `vocab_file` as the model of `options` (`BiLMOptions`) reads text:
    token ids alone, UTF-8 byte ids (`UnicodeCharsVocabulary`) or a model's own dictionaries
    (`DictionaryCharsVocabulary`). It must hold `<S>`, `</S>` and `<UNK>`."""
    cnn = options.char_cnn
    if cnn is None or cnn.characters is None:
        return load_vocab(vocab_file, None if cnn is None else cnn.max_characters_per_token)
    words = options.word_embedding.dictionary if options.word_embedding is not None else None
    return DictionaryCharsVocabulary(vocab_file, cnn.characters, words, cnn.max_characters_per_token,
                                     validate_file=True)


def check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"{name} must be a positive integer. Received: {name}={value!r}")
    return int(value)


def _pack_batches(lines, encode, batch_size, num_steps, max_word_length, skip=0):
    """Cuts a stream of sentences into windows (bilm-tf's `_get_batch`).

    Args:
        lines: iterator of sentence lines.
        encode: line -> `(token_ids (n + 2,), char_ids (n + 2, C) or None)`,
            the sentence framed by its boundaries.
        batch_size, num_steps: window shape.
        max_word_length: C, or None for token ids only.
        skip: windows to pass over first. They are cut the same way, on
            each line's token count alone, so a sentence is only encoded
            once a yielded window needs it.

    Yields:
        dicts with `token_ids` int32 `(batch_size, num_steps)`,
        `token_characters` int32 `(batch_size, num_steps, C)` or None, and
        `next_token_id` int32 `(batch_size, num_steps)`. When `lines` ends,
        the incomplete batch is dropped and iteration stops.
    """
    # Per row, its current sentence: [line, encoding or None, first unused
    # position, length with the frame].
    rows = [None] * batch_size
    for batch in itertools.count():
        write = batch >= skip
        token_ids = np.zeros((batch_size, num_steps), np.int32)
        next_token_id = np.zeros((batch_size, num_steps), np.int32)
        chars = None
        if max_word_length is not None and write:
            chars = np.zeros((batch_size, num_steps, max_word_length), np.int32)
        for row in range(batch_size):
            position = 0
            while position < num_steps:
                # A sentence whose last token is left is done: that token is
                # only ever a target.
                if rows[row] is None or rows[row][3] - rows[row][2] <= 1:
                    line = next(lines, None)
                    if line is None:
                        return
                    if write:
                        encoded = encode(line)
                        rows[row] = [line, encoded, 0, len(encoded[0])]
                    else:
                        rows[row] = [line, None, 0, len(split_tokens(line)) + 2]
                sentence = rows[row]
                start = sentence[2]
                how_many = min(sentence[3] - start - 1, num_steps - position)
                end = position + how_many
                if write:
                    if sentence[1] is None:
                        sentence[1] = encode(sentence[0])
                    ids, char_ids = sentence[1]
                    token_ids[row, position:end] = ids[start:start + how_many]
                    next_token_id[row, position:end] = ids[start + 1:start + how_many + 1]
                    if chars is not None:
                        chars[row, position:end] = char_ids[start:start + how_many]
                sentence[2] = start + how_many
                position = end
        if write:
            yield {"token_ids": token_ids, "token_characters": chars, "next_token_id": next_token_id}


class LMDataset:
    """One direction of the training stream over sharded text.

    Shards are `sorted(glob.glob(filepattern))`, read one at a time.
    Training (`test=False`) loops over the shards forever, in a new random
    order on every pass, and with `shuffle_on_load` also shuffles the
    sentences of each shard (which then is held in memory). `test=True` reads
    each shard once, in sorted order, sentences in file order
    (`shuffle_on_load` is ignored), and the stream ends. Blank lines are
    skipped; empty shards are skipped with a warning.

    All randomness comes from `np.random.default_rng(seed)`; every call of
    `iter_batches` starts the stream over, so with the same seed it yields
    the same batches. With `seed=None` a seed is drawn once and kept in
    `self.seed`.

    Args:
        filepattern: glob of the shard files.
        vocab: a `Vocabulary` (token ids only) or `UnicodeCharsVocabulary`
            (token ids and character ids), with `<S>`, `</S>` and `<UNK>`.
        reverse: the backward stream: each sentence's tokens reversed and
            framed `</S> ... <S>`, as in bilm-tf.
        test: read the data once, in order (evaluation).
        shuffle_on_load: shuffle the sentences within each shard (training).
        seed: int seed of the shard and sentence shuffles.

    Example:
    >>> data = LMDataset("train/*.txt", load_vocab("vocab.txt", 50), seed=0)
    >>> batch = next(data.iter_batches(batch_size=128, num_steps=20))
    >>> batch["token_characters"].shape
    (128, 20, 50)
    """

    def __init__(self, filepattern, vocab, reverse=False, test=False, shuffle_on_load=False, seed=None):
        vocab.require(TRAINING_TOKENS, "training")
        self.filepattern = filepattern
        self.vocab = vocab
        self.reverse = bool(reverse)
        self.test = bool(test)
        self.shuffle_on_load = bool(shuffle_on_load)
        if seed is None:
            seed = np.random.SeedSequence().entropy
        np.random.default_rng(seed)  # rejects an invalid seed now, not mid-training
        self.seed = seed
        self.shards = self._nonempty_shards(list_shards(filepattern))
        self._use_char_inputs = isinstance(vocab, UnicodeCharsVocabulary)
        # Shards already checked for invalid UTF-8 (shared with the other
        # stream of a BidirectionalLMDataset, so each file warns once).
        self._warned_files = set()

    def _nonempty_shards(self, shards):
        kept = []
        for path in shards:
            if not has_sentences(path):
                warnings.warn(
                    f"Shard {path!r} has no sentences (empty or only blank "
                    "lines); skipping it.",
                    stacklevel=3,
                )
            else:
                kept.append(path)
        if not kept:
            raise UserError(
                f"Every file matching {self.filepattern!r} is empty or blank: "
                f"{', '.join(shards)}. Point the pattern at text files with one "
                "sentence per line."
            )
        return kept

    @property
    def max_word_length(self):
        """C of `token_characters`, or None for a token-only vocabulary."""
        return self.vocab.max_word_length if self._use_char_inputs else None

    def _read(self, path):
        warn = path not in self._warned_files
        self._warned_files.add(path)
        return read_lines(path, warn_invalid_utf8=warn)

    def iter_lines(self, one_pass=False):
        """Yields the stream's sentence lines (`str`) in the order training reads them; with
        `one_pass`, a training stream ends after its first pass over the corpus instead of
        starting another."""
        return self._lines(one_pass)

    def _lines(self, one_pass=False):
        if self.test:
            for path in self.shards:
                yield from self._read(path)
            return
        rng = np.random.default_rng(self.seed)
        for _ in itertools.count() if not one_pass else range(1):
            n_lines = 0
            for index in rng.permutation(len(self.shards)):
                lines = self._read(self.shards[index])
                if self.shuffle_on_load:
                    shard = list(lines)
                    lines = (shard[i] for i in rng.permutation(len(shard)))
                for line in lines:
                    n_lines += 1
                    yield line
            if n_lines == 0:
                raise UserError(
                    f"The shards matching {self.filepattern!r} have become "
                    "empty while training; nothing left to read."
                )

    def _encode(self, line):
        tokens = split_tokens(line)
        if self.reverse:
            # `encode(reverse=True)` only swaps the frame; the tokens are
            # reversed here, as in bilm-tf's LMDataset.
            tokens.reverse()
        ids = self.vocab.encode(tokens, self.reverse, split=False)
        chars = self._char_ids(tokens, ids) if self._use_char_inputs else None
        return ids, chars

    def _char_ids(self, tokens, ids):
        """`vocab.encode_chars(tokens, reverse, split=False)`, vectorised.

        Rows of in-vocabulary tokens and of the frame come from the
        vocabulary's table; only out-of-vocabulary tokens (id `<UNK>`) are
        converted one by one, from the token itself.
        """
        chars = self.vocab.word_char_ids[ids]
        for position in np.flatnonzero(ids[1:-1] == self.vocab.unk):
            token = tokens[position]
            if token != UNK_TOKEN:
                chars[position + 1] = self.vocab.word_to_char_ids(token)
        return chars

    def iter_sentences(self):
        """Yields `(token_ids int32 (n + 2,), char_ids int32 (n + 2, C) or None)`."""
        return map(self._encode, self._lines())

    def iter_batches(self, batch_size, num_steps, skip=0):
        """Yields the training windows, starting the stream over.

        Args:
            skip: windows to pass over first, as if read and dropped; only
                the lines are split to count tokens, so a restart deep into
                an epoch does not encode everything before it again.

        Yields:
            dicts with `token_ids` int32 `(batch_size, num_steps)`,
            `token_characters` int32 `(batch_size, num_steps,
            max_word_length)` (unshifted ids, 261 values) or None for a
            token-only vocabulary, and `next_token_id` int32
            `(batch_size, num_steps)`. In test mode the last, incomplete
            batch is not yielded.
        """
        batch_size = check_positive("batch_size", batch_size)
        num_steps = check_positive("num_steps", num_steps)
        return _pack_batches(self._lines(), self._encode, batch_size, num_steps, self.max_word_length, skip)

    def _reversed(self, seed):
        """The same shards (and warnings), read in the other direction with `seed`."""
        other = copy.copy(self)
        other.reverse = not self.reverse
        other.seed = seed
        return other


def backward_seed(seed):
    """The backward stream's seed, given the forward stream's (int): another, fixed, random stream."""
    return [int(seed), 1]


class BidirectionalLMDataset:
    """The forward and backward streams of the biLM's batches.

    In training, each direction reads the corpus in its own random order
    (the backward stream's seed is drawn from the forward's, see
    `backward_seed`), as bilm-tf's two datasets did: row `i` of a forward
    batch and row `i` of the backward batch hold different sentences, so a
    step's shared parameters (char CNN, softmax) see twice as much distinct
    text as they would if the directions read the same sentences
    (docs/learning_parity.md measures both layouts). A test stream
    (`test=True`) reads the files in order in both directions.

    Args:
        filepattern, vocab, test, shuffle_on_load, seed: as for `LMDataset`.
    """

    def __init__(self, filepattern, vocab, test=False, shuffle_on_load=False, seed=None):
        self.forward = LMDataset(
            filepattern, vocab, reverse=False, test=test, shuffle_on_load=shuffle_on_load, seed=seed
        )
        self.backward = self.forward._reversed(backward_seed(self.forward.seed))

    @property
    def vocab(self):
        return self.forward.vocab

    @property
    def max_word_length(self):
        return self.forward.max_word_length

    @property
    def seed(self):
        return self.forward.seed

    def iter_batches(self, batch_size, num_steps, skip=0):
        """Yields `LMDataset.iter_batches` dicts of both directions in one.

        Keys: `token_ids`, `token_characters`, `next_token_id` (forward) and
        the same with suffix `_reverse` (backward), shapes as for `LMDataset`.
        """
        for forward, backward in zip(
            self.forward.iter_batches(batch_size, num_steps, skip),
            self.backward.iter_batches(batch_size, num_steps, skip),
        ):
            for key, value in backward.items():
                forward[key + REVERSE_SUFFIX] = value
            yield forward


def load_training_data(options, filepattern, vocab_file, test=False, seed=0):
    """`(data stream, vocabulary)` for `options` from shard files.

    Character ids when the options have `char_cnn` (UTF-8 bytes, or the
    model's own dictionaries: `vocabulary_for`); both directions
    (`BidirectionalLMDataset`) when `bidirectional` (the default). Training
    streams shuffle with `seed`, so that a restart can skip what was read.
    """
    parsed = load_options(options)
    vocab = vocabulary_for(parsed, vocab_file)
    bidirectional = parsed.get("bidirectional", option_key("bidirectional").default)
    dataset = BidirectionalLMDataset if bidirectional else LMDataset
    return dataset(filepattern, vocab, test=test, shuffle_on_load=not test, seed=seed), vocab
