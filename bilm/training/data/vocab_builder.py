"""Building a training vocabulary file from sharded text."""
import collections

from bilm.errors import UserError
from bilm.io.formats.output_files import atomic_output, check_output_file
from bilm.text.vocabulary import TRAINING_TOKENS
from bilm.text.vocabulary_file import MAXTERMID_LINE, write_vocabulary_file
from bilm.text.whitespace import split_tokens
from bilm.training.data.shards import list_shards, read_lines

SPECIAL_TOKENS = TRAINING_TOKENS  # written first, in this order


def count_words(filepattern):
    """`collections.Counter` of the whitespace tokens of all shards (streamed)."""
    counts = collections.Counter()
    for path in list_shards(filepattern):
        for line in read_lines(path):
            counts.update(split_tokens(line))
    return counts


def build_vocab(filepattern, outfile, min_count=1, max_size=None, overwrite=False):
    """Writes the vocabulary file of a corpus; returns its number of lines.

    The file starts with `<S>`, `</S>`, `<UNK>`, then every token seen at
    least `min_count` times, by descending count (ties by the token string,
    so the file is deterministic): the order the sampled softmax's
    log-uniform sampler assumes. Tokens equal to a special token or to
    `!!!MAXTERMID` (a line `Vocabulary` skips) are left out. Invalid UTF-8
    bytes are written back unchanged. The file is written to a temporary
    name and renamed; an existing `outfile` is never replaced unless
    `overwrite=True` (checked before the corpus is read).

    Args:
        filepattern: glob of the training shards (one sentence per line).
        outfile: path of the vocabulary file.
        min_count: smallest count of a kept token (>= 1).
        max_size: most lines in the file, the three special tokens included
            (>= 3), so it is the `n_tokens_vocab` of the result; None for no
            limit.
        overwrite: replace an existing `outfile`.

    Returns:
        The number of lines written (the vocabulary size).
    """
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise UserError(f"min_count must be an integer >= 1. Received: min_count={min_count!r}")
    if max_size is not None and (
        isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < len(SPECIAL_TOKENS)
    ):
        raise UserError(
            "max_size counts the lines of the file including <S>, </S> and "
            f"<UNK>, so it must be an integer >= 3 or None. Received: max_size={max_size!r}"
        )
    outfile = check_output_file(outfile, list_shards(filepattern), overwrite=overwrite)
    counts = count_words(filepattern)
    if not counts:
        raise UserError(
            f"The files matching {filepattern!r} hold no tokens; cannot build a "
            "vocabulary. Point the pattern at the training text."
        )
    for token in SPECIAL_TOKENS + (MAXTERMID_LINE,):
        counts.pop(token, None)
    kept = sorted(
        (item for item in counts.items() if item[1] >= min_count),
        key=lambda item: (-item[1], item[0]),
    )
    tokens = list(SPECIAL_TOKENS) + [token for token, _ in kept]
    if max_size is not None:
        tokens = tokens[:max_size]

    with atomic_output(outfile) as tmp:
        write_vocabulary_file(tmp, tokens)
    return len(tokens)
