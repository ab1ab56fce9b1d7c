"""check_output_file and atomic_output: no input is ever overwritten, nor a file bilm did not write."""
import os

import h5py
import pytest

from bilm.io.output_files import (
    KIND_ATTRIBUTE,
    OutputFileError,
    atomic_output,
    check_output_directory,
    check_output_file,
    hdf5_kind,
)


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
