"""check_output_file, atomic_output and writer_lock: no input is ever overwritten, nor a file bilm did not
write, and one process at a time writes an output."""
import os
import signal
import threading

import h5py
import pytest

from bilm.io.formats.output_files import (
    KIND_ATTRIBUTE,
    OutputFileError,
    OutputLockedError,
    atomic_output,
    check_output_directory,
    check_output_file,
    hdf5_kind,
    lock_path,
    writer_lock,
)
from helpers import ready_process


def _bilm_file(path, kind):
    with h5py.File(path, "w") as f:
        f.attrs[KIND_ATTRIBUTE] = kind
    return str(path)


@pytest.mark.parametrize("link", ["same path", "symlink", "hard link", "relative path"])
def test_an_output_that_is_an_input_is_refused_naming_both(tmp_path, link, monkeypatch):
    source = tmp_path / "in.txt"
    source.write_text("The cat sat .\n")
    output = {"same path": source, "symlink": tmp_path / "link.hdf5", "hard link": tmp_path / "hard.hdf5",
              "relative path": "in.txt"}[link]
    if link == "symlink":
        os.symlink(source, output)
    elif link == "hard link":
        os.link(source, output)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputFileError, match=f"output .*{os.path.basename(str(output))}.* input .*in.txt"):
        check_output_file(output, [str(source)], kind="sentence_embeddings", overwrite=True)
    assert source.read_text() == "The cat sat .\n"


def test_an_existing_file_is_replaced_only_if_bilm_wrote_it_as_that_kind(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("mine")
    with pytest.raises(OutputFileError, match="notes.txt already exists and is not a file that bilm wrote.*"
                                              "--overwrite"):
        check_output_file(text, kind="sentence_embeddings")
    weights = _bilm_file(tmp_path / "weights.hdf5", "weights")
    with pytest.raises(OutputFileError, match="is a bilm weights file.*--overwrite"):
        check_output_file(weights, kind="sentence_embeddings")
    other_hdf5 = tmp_path / "other.hdf5"
    with h5py.File(other_hdf5, "w") as f:
        f["x"] = [1.0]
    with pytest.raises(OutputFileError, match="not a file that bilm wrote"):
        check_output_file(other_hdf5, kind="weights", flag="overwrite=True")
    own = _bilm_file(tmp_path / "own.hdf5", "sentence_embeddings")
    assert check_output_file(own, kind="sentence_embeddings") == own
    assert check_output_file(text, kind="sentence_embeddings", overwrite=True) == str(text)
    assert hdf5_kind(text) is None and hdf5_kind(weights) == "weights"


def test_an_existing_text_output_is_replaced_only_if_it_holds_what_the_run_writes(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("mine")
    for content in (None, "other", lambda existing: existing == b"other"):
        with pytest.raises(OutputFileError, match="notes.txt already exists .*never replaced without --overwrite"):
            check_output_file(text, content=content)
    assert check_output_file(text, content="mine") == str(text)
    assert check_output_file(text, content=lambda existing: existing == b"mine") == str(text)
    assert check_output_file(text, overwrite=True) == str(text)
    assert check_output_file(tmp_path / "new.txt") == str(tmp_path / "new.txt")
    assert text.read_text() == "mine"


def test_a_missing_directory_is_created_and_a_file_in_its_place_is_an_error(tmp_path):
    path = tmp_path / "new" / "deeper" / "out.hdf5"
    assert check_output_file(path, kind="weights") == str(path)
    assert path.parent.is_dir() and not path.exists()
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(OutputFileError, match="file.txt: it is a file, not a directory"):
        check_output_file(blocker / "out.hdf5")
    with pytest.raises(OutputFileError, match="Cannot create the output directory .*file.txt/sub"):
        check_output_directory(blocker / "sub" / "dir")


def test_an_unwritable_directory_is_an_error_before_any_work(tmp_path, monkeypatch):
    # As root a permission bit does not stop a write, so the check itself is
    # made to see what a read-only file system shows it.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(OutputFileError, match=f"Cannot write into {tmp_path}: it is not writable"):
        check_output_file(tmp_path / "out.hdf5")


def test_atomic_output_renames_when_complete_and_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as tmp:
            assert os.path.dirname(tmp) == str(tmp_path) and tmp != str(target)
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("crash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"] and target.read_text() == "old"
    with atomic_output(target) as tmp, open(tmp, "w") as f:
        f.write("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"] and target.read_text() == "new"
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~_umask()


def test_atomic_output_replaces_a_directory_whole(tmp_path):
    target = tmp_path / "export"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_output(target, directory=True) as tmp:
        (tmp_path / os.path.basename(tmp) / "new.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_an_existing_directory_is_refused_as_an_output_file_even_with_overwrite(tmp_path):
    folder = tmp_path / "out.hdf5"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(OutputFileError, match="is a directory"):
            check_output_file(str(folder), kind="sentence_embeddings", overwrite=overwrite)
    assert (folder / "keep.txt").read_text() == "mine"


def holder(code, *args):
    """A second process that runs `code` (with `sys.argv[1:] == args`), prints "ready" and waits for a line on its
    stdin before it ends; returned once it is ready."""
    return ready_process("import sys\n" + code + "\nprint('ready', flush=True)\nsys.stdin.readline()\n", *args)


def release(child):
    """Lets a `holder` end; returns its exit status."""
    child.communicate("\n", timeout=120)
    return child.returncode


HOLD_THE_LOCK = """
from bilm.io.formats.output_files import writer_lock
lock = writer_lock(sys.argv[1])
lock.__enter__()
"""


@pytest.mark.slow
def test_a_second_process_is_refused_naming_the_writers_pid_and_a_killed_writers_lock_is_taken_over(tmp_path):
    out = tmp_path / "out.hdf5"
    child = holder(HOLD_THE_LOCK, out)
    try:
        with pytest.raises(OutputLockedError, match=rf"^Another process \(PID {child.pid}\) is writing {out} "
                                                    rf"\(it holds {out}.lock\); wait until it ends"):
            with writer_lock(out):
                raise AssertionError("two writers of one output")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Killed, it could not remove its lock file; the kernel released the lock, so the file is taken over.
    assert f"pid {child.pid}" in (tmp_path / "out.hdf5.lock").read_text()
    with writer_lock(out) as lock:
        assert lock == lock_path(out) == f"{out}.lock" and f"pid {os.getpid()}" in open(lock).read()
    assert os.listdir(tmp_path) == []  # released: the lock file is gone


def test_the_lock_is_taken_again_by_its_thread_and_refused_to_another(tmp_path):
    out = tmp_path / "sub" / "out.hdf5"
    refused = []

    def other_thread():
        try:
            with writer_lock(out):
                pass
        except OutputLockedError as error:
            refused.append(str(error))

    with writer_lock(out):
        with writer_lock(out):  # nested: the outer block releases
            pass
        assert (tmp_path / "sub" / "out.hdf5.lock").exists()  # its directory was created
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert refused and refused[0].startswith("Another thread of this process is writing")
    assert os.listdir(tmp_path / "sub") == []
    with writer_lock(out):  # free again
        pass


def test_a_users_file_in_the_place_of_the_lock_file_is_never_replaced(tmp_path):
    (tmp_path / "out.hdf5.lock").write_text("my notes")
    with pytest.raises(OutputFileError, match="out.hdf5.lock exists and is not a lock file that bilm wrote"):
        with writer_lock(tmp_path / "out.hdf5"):
            raise AssertionError("locked with a user's file")
    assert (tmp_path / "out.hdf5.lock").read_text() == "my notes"


def test_a_file_another_program_has_open_for_writing_is_never_replaced(tmp_path):
    # HDF5's own lock: a program (not bilm) writing the file, e.g. h5py in a notebook.
    path = tmp_path / "out.hdf5"
    child = holder("import h5py\nf = h5py.File(sys.argv[1], 'w')\nf.attrs['bilm_file'] = 'weights'\nf.flush()", path)
    try:
        for overwrite in (False, True):
            with pytest.raises(OutputLockedError, match=f"^{path} is open for writing in another process"):
                check_output_file(path, kind="weights", overwrite=overwrite)
    finally:
        assert release(child) == 0
    assert hdf5_kind(path) == "weights"
