"""Importing TensorFlow, for a command so that `TF_CPP_MIN_LOG_LEVEL` also covers the lines it logs while loading.

TensorFlow's C++ libraries log a few lines while they load (oneDNN, CUDA
and CPU-feature notices, each library once), before the logging library
has read `TF_CPP_MIN_LOG_LEVEL`, so they appear whatever it says. Only
where a command asks (`filter_load_logs`, see `bilm.utils.start_up`; a
library never redirects a process's file descriptors on its own), the
process's standard error goes to a temporary file while TensorFlow is
imported; afterwards each captured record is written back unless its
level is below `TF_CPP_MIN_LOG_LEVEL` (0 info, 1 warning, 2 error, 3
fatal). Anything that is not such a record (a Python traceback, another
library's output) is written back unchanged. Without the variable every
line is written back. If TensorFlow is already imported this does nothing.
"""
import os
import re
import sys
import tempfile

# absl's line prefix: level letter, date, time, thread, file:line]
_RECORD = re.compile(rb"^([IWEF])\d{4} [\d:.]+\s+\d+ [^\]]*\] ")
_LEVELS = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
# absl's notice that it logs to stderr until initialised: a warning.
_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def import_tensorflow(filter_load_logs=False):
    """Imports TensorFlow; with `filter_load_logs`, dropping its load-time log records below
    `TF_CPP_MIN_LOG_LEVEL` (standard error is redirected while it loads)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    if not filter_load_logs:
        import tensorflow
        return tensorflow
    try:
        min_level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        min_level = 0
    if min_level <= 0:
        import tensorflow
        return tensorflow
    try:
        stderr_fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
        saved = os.dup(stderr_fd)
    except (OSError, ValueError, AttributeError):  # no usable standard error to redirect
        import tensorflow
        return tensorflow
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        os.dup2(captured.fileno(), stderr_fd)
        try:
            import tensorflow
        finally:
            sys.stderr.flush()
            os.dup2(saved, stderr_fd)
            os.close(saved)
            captured.seek(0)
            kept = filter_records(captured.read(), min_level)
            if kept:
                os.write(stderr_fd, kept)
    return tensorflow


def filter_records(text, min_level):
    """`text` (bytes) without the log records below `min_level`.

    Lines that start no record continue the record before them and share
    its fate; lines before the first record are kept.
    """
    out, keep = [], True
    for line in text.splitlines(keepends=True):
        match = _RECORD.match(line)
        if match:
            keep = _LEVELS[match.group(1)] >= min_level
        elif line.rstrip(b"\r\n") == _NOTICE:
            keep = min_level <= _LEVELS[b"W"]
        if keep:
            out.append(line)
    return b"".join(out)
