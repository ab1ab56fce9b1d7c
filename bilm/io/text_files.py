"""Reading a UTF-8 text file line by line, the one way bilm reads training shards and sentence files."""
import warnings


def read_text_lines(path, warn_invalid_utf8=True, invalid_bytes_become="raw byte character ids"):
    """Yields `(line_number, line)` of a text file, 0-based, in file order.

    A line ends at `"\\n"` (a `"\\r"` before it is dropped too; nothing else
    ends one). Lines are UTF-8; invalid bytes are kept as lone surrogates
    (`errors="surrogateescape"`), so they reach the character ids unchanged
    instead of failing the whole file, and the first such line warns once,
    naming the file and the line, saying what the bytes become
    (`invalid_bytes_become`).
    """
    warn = warn_invalid_utf8
    with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        for number, line in enumerate(f):
            line = line.rstrip("\n").rstrip("\r")
            if warn and not line.isascii():
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError:
                    warn = False
                    warnings.warn(
                        f"{path} is not valid UTF-8 (first at line {number}, 0-based); its invalid bytes become "
                        f"{invalid_bytes_become}. Re-encode the file as UTF-8 to silence this.", stacklevel=3)
            yield number, line
