"""Output files written safely.

Every writer in bilm goes through here:
- `check_output_file`, before any work: the output is not one of the run's
  inputs (under any name: the same path, a symlink, a hard link), an
  existing file is only replaced if bilm wrote it as the same kind of file,
  or it already holds exactly what the run will write, or the caller passed
  `overwrite=True`; its directory exists (it is created) and is writable;
- `atomic_output`: the file is written under a temporary name beside it and
  renamed when complete, so a crash never leaves a complete-looking file;
- `writer_lock`: one process writes an output at a time. The lock is the
  file `OUTPUT.lock` beside it, locked with `flock` (the kernel releases it
  when its process dies, so a killed run's lock is simply taken over) and
  holding its process's PID for the message another process gets.

Every HDF5 file bilm writes carries a root attribute `bilm_file` naming its
kind (`FILE_KINDS`), which is how an existing output is recognised.
"""
import contextlib
import errno
import os
import shutil
import threading
import uuid

import h5py

from bilm.errors import UserError

KIND_ATTRIBUTE = "bilm_file"
FILE_KINDS = ("weights", "token_embeddings", "sentence_embeddings")


class OutputFileError(UserError):
    """An output would replace an input or a file bilm did not write, or cannot be written."""


class OutputLockedError(OutputFileError):
    """Another process (or thread) is writing the same output."""


def hdf5_lock_error(path, error):
    """The OutputFileError for HDF5's own lock `error` (the file `path` is
    open for writing in another process), or None for any other error."""
    if getattr(error, "errno", None) in (errno.EAGAIN, errno.EWOULDBLOCK) or "unable to lock file" in str(error):
        return OutputLockedError(
            f"{path} is open for writing in another process (HDF5 cannot lock it); wait until that process "
            "ends or closes it, or choose another output path.")
    return None


def hdf5_kind(path):
    """The `bilm_file` kind of an HDF5 file bilm wrote, or None for any other
    file; OutputLockedError when another process has it open for writing."""
    try:
        with h5py.File(path, "r") as f:
            kind = f.attrs.get(KIND_ATTRIBUTE)
    except (OSError, ValueError) as error:
        locked = hdf5_lock_error(path, error)
        if locked is not None:
            raise locked from None
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
            kind, and never while another process has it open for writing
            (not even with `overwrite`). `None` (a text output, which carries no kind): an existing
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
    if os.path.exists(path) and kind is not None:
        found = hdf5_kind(path)  # raises when another process is writing it
        if found != kind and not overwrite:
            what = f"a bilm {found} file" if found else "not a file that bilm wrote"
            raise OutputFileError(
                f"The output {path} already exists and is {what}; it is never replaced without {flag}. "
                f"Choose another output path, or pass {flag} to replace it.")
    elif os.path.exists(path) and kind is None and not overwrite and not _holds(path, content):
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


LOCK_SUFFIX = ".lock"
_LOCK_HEADER = b"bilm writer lock\n"
# The writer locks this process holds: lock path -> [fd, owning thread, depth].
_held_locks = {}
_held_locks_guard = threading.Lock()


def lock_path(path):
    """The lock file of the output `path`: `path + ".lock"`, beside it."""
    return os.path.abspath(os.fspath(path)) + LOCK_SUFFIX


@contextlib.contextmanager
def writer_lock(path):
    """Holds the lock of the output `path` (a file or a directory) for the block.

    Only one process (and thread) at a time writes an output: the lock is
    `path + ".lock"`, locked with `flock`, holding `pid <PID>`. Another
    process that asks for it gets OutputLockedError in one line naming the
    PID; one whose holder died (even killed) takes it over, since the kernel
    releases a dead process's lock. The thread that holds it may take it
    again (the outermost block releases it). The lock file is removed when
    released. A file of that name that bilm did not write is never replaced.
    Where `fcntl` is missing (Windows) the block runs without a lock.

    Yields:
        the lock file's path.
    """
    lock = lock_path(path)
    me = threading.get_ident()
    with _held_locks_guard:
        held = _held_locks.get(lock)
        if held is not None and held[1] != me:
            raise OutputLockedError(f"Another thread of this process is writing {os.path.abspath(os.fspath(path))}; "
                                    "write one output from one thread at a time.")
        if held is not None:
            held[2] += 1
        else:
            _held_locks[lock] = [_acquire(lock, path), me, 1]
    try:
        yield lock
    finally:
        with _held_locks_guard:
            held = _held_locks[lock]
            held[2] -= 1
            if held[2] == 0:
                del _held_locks[lock]
                _release(lock, held[0])


def _acquire(lock, output):
    """Opens and locks `lock`; returns its file descriptor (None without `fcntl`)."""
    try:
        import fcntl
    except ImportError:
        return None
    output = os.path.abspath(os.fspath(output))
    check_output_directory(os.path.dirname(lock))
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as error:
            raise OutputFileError(f"Cannot open the lock file {lock} of {output}: {error.strerror or error}. Choose "
                                  "another output path.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            content = _read_all(fd)
            os.close(fd)
            if error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise OutputFileError(f"Cannot lock {lock} (the lock file of {output}): "
                                      f"{error.strerror or error}.") from None
            pid = _lock_pid(content)
            who = f"Another process (PID {pid})" if pid else "Another process"
            raise OutputLockedError(f"{who} is writing {output} (it holds {lock}); wait until it ends, or write to "
                                    "another output path.") from None
        # A holder that released the lock just before removes its file: lock the file that is there now.
        try:
            current = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    content = _read_all(fd)
    if content and not content.startswith(_LOCK_HEADER):
        os.close(fd)
        raise OutputFileError(f"{lock} exists and is not a lock file that bilm wrote; bilm writes {output} only "
                              "with that name as its lock. Move that file away, or choose another output path.")
    os.ftruncate(fd, 0)
    os.pwrite(fd, _LOCK_HEADER + f"pid {os.getpid()}\n".encode("ascii"), 0)
    return fd


def _release(lock, fd):
    if fd is None:
        return
    try:
        os.remove(lock)  # while still locked, so a process that opened it sees it gone and retries
    except OSError:
        pass
    os.close(fd)


def _read_all(fd):
    try:
        return os.pread(fd, 4096, 0)
    except OSError:
        return b""


def _lock_pid(content):
    """The PID a bilm lock file's bytes name, or None."""
    if not content.startswith(_LOCK_HEADER):
        return None
    for line in content[len(_LOCK_HEADER):].decode("ascii", "replace").splitlines():
        key, _, value = line.partition(" ")
        if key == "pid" and value.strip().isdigit():
            return int(value)
    return None
