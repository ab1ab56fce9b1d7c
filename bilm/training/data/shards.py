"""A corpus on disk: shard files matched by a glob, one sentence per line, read as a stream."""
import glob
import os

from bilm.errors import UserError
from bilm.io.formats.text_files import read_text_lines
from bilm.text.whitespace import split_tokens


def list_shards(filepattern):
    """Sorted paths matched by the glob `filepattern`; ValueError if none."""
    filepattern = os.fspath(filepattern)
    shards = sorted(path for path in glob.glob(filepattern) if os.path.isfile(path))
    if not shards:
        if os.path.isdir(filepattern):
            inside = os.path.join(filepattern, "*")
            raise UserError(f"{filepattern!r} is a directory; give a pattern of its files, e.g. '{inside}' "
                            "(quoted, so that the shell leaves it to bilm).")
        raise UserError(
            f"No file matches the pattern {filepattern!r}. Pass a glob of "
            "text files with one sentence per line, e.g. 'data/train/*.txt'."
        )
    return shards


def read_lines(path, warn_invalid_utf8=True):
    """Yields the non-blank lines of one shard, as `str`, in file order.

    Lines as `bilm.io.formats.text_files.read_text_lines` reads them (UTF-8, invalid
    bytes kept as raw byte character ids with one warning, unless
    `warn_invalid_utf8` is False).
    """
    for _, line in read_text_lines(path, warn_invalid_utf8, invalid_bytes_become=(
            "raw byte character ids, and such tokens map to <UNK> unless the vocabulary holds the same bytes")):
        if line and not line.isspace():
            yield line


def count_tokens(filepattern):
    """Number of whitespace tokens in all shards (`<S>`/`</S>` not counted).

    This is bilm-tf's `n_train_tokens`. Streams the files line by line.
    """
    return sum(_sentence_lengths(list_shards(filepattern)))


def report_token_count(n_tokens, filepattern, verbose=1):
    """Says `Counted N tokens in PATTERN.` when `verbose` (a run that counted its `n_train_tokens`, on every
    backend); returns `n_tokens`."""
    if verbose:
        print(f"Counted {n_tokens:,} tokens in {filepattern}.", flush=True)
    return n_tokens


def count_positions(paths, limit):
    """Target positions of one pass over the files `paths` in one direction
    (each sentence's tokens and its end), counted until `limit` is reached.

    Returns:
        `min(positions, limit)`; streams only as many lines as that needs.
    """
    total = 0
    for length in _sentence_lengths(paths):
        total += length + 1
        if total >= limit:
            return limit
    return total


def _sentence_lengths(paths):
    """Whitespace tokens of each sentence of the files `paths`, streamed line by line."""
    for path in paths:
        for line in read_lines(path, warn_invalid_utf8=False):
            yield len(split_tokens(line))


def has_sentences(path):
    lines = read_lines(path, warn_invalid_utf8=False)
    try:
        return next(lines, None) is not None
    finally:
        lines.close()
