"""Reading a UTF-8 text file line by line, the one way bilm reads training shards and sentence files."""
import os
import threading
import warnings

from bilm.errors import UserError

# Files already warned about (path, size, modification time, what the bytes become): a file read twice the
# same way (a check, then the work) warns once per process.
_WARNED = set()
_WARNED_LOCK = threading.Lock()


def read_text_lines(path, warn_invalid_utf8=True, invalid_bytes_become="raw byte character ids"):
    """Yields `(line_number, line)` of a text file, 0-based, in file order.

    A line ends at `"\\n"` (a `"\\r"` before it is dropped too; nothing else
    ends one). Lines are UTF-8; invalid bytes are kept as lone surrogates
    (`errors="surrogateescape"`), so they reach the character ids unchanged
    instead of failing the whole file, and the first such line warns once
    per process and file, naming the file and the line (1-based, as editors
    count), saying what the bytes become (`invalid_bytes_become`).

    Raises:
        UserError: a line holds a NUL byte, which no text has: the file is
            binary (an archive, an HDF5 file, a model), named with the line.
    """
    warn = warn_invalid_utf8 and not _warned_before(path, invalid_bytes_become)
    with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        for number, line in enumerate(f):
            line = line.rstrip("\n").rstrip("\r")
            if not line.isascii() or "\0" in line:
                if "\0" in line:
                    raise UserError(f"{path} line {number + 1} holds a NUL byte: it is a binary file, not text. "
                                    "Give a text file, one sentence per line.")
                if warn:
                    try:
                        line.encode("utf-8")
                    except UnicodeEncodeError:
                        warn = False
                        _note_warned(path, invalid_bytes_become)
                        warnings.warn(
                            f"{path} is not valid UTF-8 (first at line {number + 1}); its invalid bytes become "
                            f"{invalid_bytes_become}. Re-encode the file as UTF-8 to silence this.", stacklevel=3)
            yield number, line


def _file_key(path, reader):
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns, reader


def _warned_before(path, reader):
    try:
        key = _file_key(path, reader)
    except OSError:
        return False  # open() names the problem
    with _WARNED_LOCK:
        return key in _WARNED


def _note_warned(path, reader):
    with _WARNED_LOCK:
        _WARNED.add(_file_key(path, reader))
