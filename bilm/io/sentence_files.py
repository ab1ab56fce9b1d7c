"""Streaming a one-sentence-per-line file in length-sorted batches."""
import itertools

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

    Lines are decoded as UTF-8 with `surrogateescape`, so invalid bytes reach
    the character ids unchanged instead of failing the whole file.
    """
    with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        for number, line in enumerate(f):
            line = line.rstrip("\n").rstrip("\r")
            yield number, line, split_tokens(line)


def length_sorted_batches(items, batch_size, tokens_of=lambda item: item[2], chunk_batches=64):
    """Groups `items` into batches of similar length, without reading them all.

    Takes `batch_size * chunk_batches` items at a time, sorts that chunk by
    token count and cuts it into batches, so padding is small and memory is
    bounded by one chunk. Yields lists of items.
    """
    items = iter(items)
    while True:
        chunk = list(itertools.islice(items, batch_size * chunk_batches))
        if not chunk:
            return
        chunk.sort(key=lambda item: len(tokens_of(item)))
        for start in range(0, len(chunk), batch_size):
            yield chunk[start:start + batch_size]
