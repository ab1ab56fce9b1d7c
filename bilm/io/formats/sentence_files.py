"""Streaming a one-sentence-per-line file in length-sorted batches."""
import itertools
import os

import numpy as np

from bilm.errors import UserError
from bilm.io.formats.text_files import read_text_lines
from bilm.text.whitespace import split_tokens


def count_lines(path):
    """Number of lines of a text file, read in binary blocks (no decoding)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def read_sentences(path):
    """Yields `(line_number, line, tokens)`; tokens are the whitespace-split line.

    Lines as `bilm.io.formats.text_files.read_text_lines` reads them (UTF-8, invalid
    bytes kept as raw byte character ids with one warning).
    """
    for number, line in read_text_lines(path):
        yield number, line, split_tokens(line)


def token_lists(sentences):
    """Sentences as token lists, lazily: from a text file's path (one sentence
    per line), or from an iterable of strings (split on whitespace) or token lists."""
    if isinstance(sentences, (str, os.PathLike)):
        return (tokens for _, _, tokens in read_sentences(os.fspath(sentences)))
    return (split_tokens(s) if isinstance(s, str) else list(s) for s in sentences)


# Items sorted together when batches are cut by a token budget.
CHUNK_ITEMS = 8192
# The token budget of a model call when the caller sets no batch size: large
# enough that each recurrent step's kernel read serves many rows (see
# docs/performance.md), small enough for the original size to stay well
# under 3 GiB.
BULK_MAX_TOKENS = 4096


def check_batch_size(batch_size):
    """Returns `batch_size` if it is a positive integer or None (batches of
    about `BULK_MAX_TOKENS` tokens); otherwise a ValueError, raised before
    any work (`length_sorted_batches` is lazy)."""
    if batch_size is not None and (
            not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1):
        raise UserError(f"batch_size must be a positive integer. Received: batch_size={batch_size!r}; "
                         f"None (the default) makes batches of about {BULK_MAX_TOKENS} tokens.")
    return batch_size


def length_sorted_batches(items, batch_size=None, tokens_of=lambda item: item[2], chunk_batches=64,
                          max_tokens=None):
    """Groups `items` into batches of similar length, without reading them all.

    Takes a chunk of items at a time (`batch_size * chunk_batches`, or
    `CHUNK_ITEMS` with `max_tokens`), sorts it by token count and cuts it
    into batches, so padding is small and memory is bounded by one chunk.

    Args:
        items: an iterable of items.
        batch_size: items per batch; or
        max_tokens: the most padded tokens per batch, boundaries included:
            a batch grows while `rows * (longest + 2) <= max_tokens` (a
            longer item gets a batch of its own). Neither: `max_tokens` is
            `BULK_MAX_TOKENS`.
        tokens_of: item -> its tokens.

    Yields:
        lists of items.
    """
    if batch_size is not None and max_tokens is not None:
        raise UserError("Pass batch_size or max_tokens, not both. "
                         f"Received: batch_size={batch_size!r}, max_tokens={max_tokens!r}")
    if batch_size is None and max_tokens is None:
        max_tokens = BULK_MAX_TOKENS
    items = iter(items)
    chunk_size = CHUNK_ITEMS if batch_size is None else batch_size * chunk_batches
    while True:
        chunk = list(itertools.islice(items, chunk_size))
        if not chunk:
            return
        chunk.sort(key=lambda item: len(tokens_of(item)))
        if batch_size is not None:
            for start in range(0, len(chunk), batch_size):
                yield chunk[start:start + batch_size]
            continue
        batch = []
        for item in chunk:  # ascending length: the newest item is the longest
            if batch and (len(batch) + 1) * (len(tokens_of(item)) + 2) > max_tokens:
                yield batch
                batch = []
            batch.append(item)
        if batch:
            yield batch
