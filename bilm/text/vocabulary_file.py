"""The vocabulary file, read and written: one token per line, its id the line's number among the tokens.

Lines are UTF-8; bytes that are not (a corpus' stray Latin-1) are kept
through `surrogateescape`, so that a token reads back as it was written.
Surrounding whitespace is stripped, and a line `!!!MAXTERMID` (which some
of bilm-tf's vocabularies hold) is skipped, taking no id.
"""
import dataclasses
import os
from typing import List, Tuple

MAXTERMID_LINE = "!!!MAXTERMID"
_TEXT = {"encoding": "utf-8", "errors": "surrogateescape"}


@dataclasses.dataclass(frozen=True)
class VocabularyLines:
    """A vocabulary file as read.

    Attributes:
        tokens: the tokens in id order.
        repeated: `(token, first line, later line)` for each token listed
            again (1-based line numbers); the later line's id is the one a
            lookup gives, as in bilm-tf.
    """

    tokens: List[str]
    repeated: List[Tuple[str, int, int]]


def read_vocabulary_file(path):
    """Reads `path` as a vocabulary file; `VocabularyLines`, or FileNotFoundError naming it."""
    path = os.fspath(path)
    try:
        f = open(path, **_TEXT)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"Vocabulary file {path!r} does not exist. Pass the path of a text file with one token per line."
        ) from None
    tokens, repeated, first_lines = [], [], {}
    with f:
        for number, line in enumerate(f, start=1):
            token = line.strip()
            if token == MAXTERMID_LINE:
                continue
            if token in first_lines:
                repeated.append((token, first_lines[token], number))
            first_lines.setdefault(token, number)
            tokens.append(token)
    return VocabularyLines(tokens, repeated)


def write_vocabulary_file(path, tokens):
    """Writes `tokens` to `path`, one a line, as `read_vocabulary_file` reads them back.

    A token that the reader would change (surrounding whitespace, a line
    break, `!!!MAXTERMID`) is a ValueError. The caller chooses the path:
    a temporary name renamed when done keeps an existing file whole.
    """
    with open(path, "w", newline="\n", **_TEXT) as f:
        for token in tokens:
            if token != token.strip() or not token or token == MAXTERMID_LINE or len(token.splitlines()) != 1:
                raise ValueError(f"{token!r} cannot be a line of a vocabulary file.")
            f.write(token + "\n")
