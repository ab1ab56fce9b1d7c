"""Output files written safely.

Every writer in bilm goes through here:
- `check_output_file`, before any work: the output is not one of the run's
  inputs (under any name: the same path, a symlink, a hard link), an
  existing file is only replaced if bilm wrote it as the same kind of file,
  or it already holds exactly what the run will write, or the caller passed
  `overwrite=True`; its directory exists (it is created) and is writable;
- `atomic_output`: the file is written under a temporary name beside it and
  renamed when complete, so a crash never leaves a complete-looking file.

Every HDF5 file bilm writes carries a root attribute `bilm_file` naming its
kind (`FILE_KINDS`), which is how an existing output is recognised.
"""
import contextlib
import os
import shutil
import uuid

import h5py

from bilm.errors import UserError

KIND_ATTRIBUTE = "bilm_file"
FILE_KINDS = ("weights", "token_embeddings", "sentence_embeddings")


class OutputFileError(UserError):
    """An output would replace an input or a file bilm did not write, or cannot be written."""


def hdf5_kind(path):
    """The `bilm_file` kind of an HDF5 file bilm wrote, or None for any other file."""
    try:
        with h5py.File(path, "r") as f:
            kind = f.attrs.get(KIND_ATTRIBUTE)
    except (OSError, ValueError):
        return None
    if isinstance(kind, bytes):
        kind = kind.decode("utf-8", "replace")
    return kind if kind in FILE_KINDS else None


def same_file(a, b):
    """Whether two paths name one file (the same path, a symlink or a hard link)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def check_output_file(path, inputs=(), kind=None, overwrite=False, flag="--overwrite", content=None):
    """Checks, before any work, that `path` can be written as an output.

    Args:
        path: the output file (never an existing directory).
        inputs: the paths the run reads (None entries are skipped); the
            output may be none of them.
        kind: the `bilm_file` kind the output will have (HDF5 outputs). An
            existing file is then replaced only if it is an HDF5 file of that
            kind. `None` (a text output, which carries no kind): an existing
            file is never replaced, unless it holds `content` already.
        overwrite: replace an existing file whatever it is (still never an input).
        flag: how the caller's user asks for `overwrite`, for the message.
        content: for a text output (`kind=None`), what will be written when
            it is known before the work (`str`, or a callable that tells
            from an existing file's bytes whether they are it): an existing
            file that holds it already is replaced (nothing is lost).

    Returns:
        the absolute path. Its directory exists afterwards.

    Raises:
        OutputFileError naming the paths and what would fix it.
    """
    path = os.path.abspath(os.fspath(path))
    for source in inputs:
        if source is not None and same_file(path, source):
            shown = os.fspath(source)
            same = "is" if os.path.abspath(shown) == path else "is the same file as"
            raise OutputFileError(
                f"The output {path} {same} the input {shown}; writing it would destroy the input. "
                "Choose another output path.")
    if os.path.isdir(path):
        raise OutputFileError(f"The output {path} is a directory; bilm never replaces a directory with a file, even "
                              "with --overwrite. Give the path of a file.")
    if os.path.exists(path) and not overwrite:
        if kind is not None:
            found = hdf5_kind(path)
            if found != kind:
                what = f"a bilm {found} file" if found else "not a file that bilm wrote"
                raise OutputFileError(
                    f"The output {path} already exists and is {what}; it is never replaced without {flag}. "
                    f"Choose another output path, or pass {flag} to replace it.")
        elif not _holds(path, content):
            raise OutputFileError(
                f"The output {path} already exists (and holds something else than this run would write); it is "
                f"never replaced without {flag}. Choose another output path, or pass {flag} to replace it.")
    check_output_directory(os.path.dirname(path))
    return path


def _holds(path, content):
    """Whether the existing file `path` holds `content` (see `check_output_file`)."""
    if content is None:
        return False
    try:
        with open(path, "rb") as f:
            existing = f.read()
    except OSError:
        return False
    if callable(content):
        return bool(content(existing))
    return existing == content.encode("utf-8")


def check_output_directory(path):
    """Creates `path` (a directory the run writes into) if missing and checks
    that it is writable; returns its absolute path or raises OutputFileError."""
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputFileError(f"Cannot write into {path}: it is a file, not a directory.")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise OutputFileError(f"Cannot create the output directory {path}: {error.strerror or error}.") from None
    if not os.access(path, os.W_OK):
        raise OutputFileError(f"Cannot write into {path}: it is not writable (read-only file system or no "
                              "permission). Choose another directory.")
    return path


def temporary_path(path):
    """A new, unused name beside `path` for writing it before the rename."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")


@contextlib.contextmanager
def atomic_output(path, directory=False):
    """Yields a temporary path beside `path`; when the block completes, it
    becomes `path` (replacing a file or, with `directory=True`, a directory
    there), otherwise it is removed. Nothing else is ever touched."""
    path = os.path.abspath(os.fspath(path))
    tmp = temporary_path(path)
    if directory:
        os.mkdir(tmp)
    else:
        # Created empty so the name is ours (O_EXCL), with the usual permissions.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield tmp
        if directory and os.path.isdir(path):
            old = temporary_path(path)
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
        elif os.path.exists(tmp):
            os.remove(tmp)
