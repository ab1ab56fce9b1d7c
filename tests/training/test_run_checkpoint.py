"""The run's checkpoint file itself: its arrays written by slices, the copies it keeps, and the files beside it
that bilm did not write."""
import os

import numpy as np
import pytest

from bilm.training.run import run_checkpoint
from bilm.training.run.run_checkpoint import CheckpointError, kept_checkpoints, read_arrays, save_checkpoint

STATE = {"bilm": [np.arange(12, dtype=np.float32).reshape(4, 3), np.float32(2.5)],
         "optimizer": {"iterations": np.int32(7), "accumulators": {"softmax/W": np.ones((5, 2), np.float32)}}}


def _save(save_dir, step, max_to_keep=3):
    return save_checkpoint(save_dir, STATE, step, {"optimizer": "adagrad"}, 0, data_source=1, max_to_keep=max_to_keep)


def test_arrays_written_by_slices_read_back_exactly(tmp_path, monkeypatch):
    big = np.random.default_rng(0).standard_normal((1000, 7)).astype(np.float32)
    monkeypatch.setattr(run_checkpoint, "CHUNK_BYTES", 100)  # 3 rows a slice: many slices, the last one short
    path = save_checkpoint(tmp_path, {"big": big, "rows": np.arange(10, dtype=np.int32), "scalar": np.int32(3)},
                           4, {}, None)
    arrays = read_arrays(path)
    np.testing.assert_array_equal(arrays["big"], big)
    np.testing.assert_array_equal(arrays["rows"], np.arange(10))
    assert arrays["scalar"].shape == () and arrays["scalar"] == 3 and arrays["scalar"].dtype == np.int32
    with np.load(path) as stored:  # np.load's own reading of every member agrees
        np.testing.assert_array_equal(stored["big"], big)


def test_the_copies_kept_are_bilms_and_a_file_of_their_name_bilm_did_not_write_is_left_alone(tmp_path):
    mine = tmp_path / "checkpoint-1.npz"
    mine.write_bytes(b"my own notes")
    for step in (2, 3, 4, 5):
        _save(tmp_path, step)
    # The latest and the max_to_keep - 1 = 2 before it; the user's file is neither counted nor removed.
    assert [step for step, _ in kept_checkpoints(tmp_path)] == [3, 4]
    assert run_checkpoint.read_meta(tmp_path)["step"] == 5 and mine.read_bytes() == b"my own notes"
    # Where the next copy would be kept, a file bilm did not write stops the save before anything is written.
    blocker = tmp_path / "checkpoint-5.npz"
    blocker.write_bytes(b"mine too")
    with pytest.raises(CheckpointError, match=f"{blocker} is where the checkpoint of step 5 is kept, and it holds "
                                              "a file bilm did not write; move it out of"):
        _save(tmp_path, 6)
    assert blocker.read_bytes() == b"mine too" and run_checkpoint.read_meta(tmp_path)["step"] == 5
    assert not any(name.endswith(".partial") for name in os.listdir(tmp_path))


def test_a_damaged_checkpoint_names_the_newest_readable_copy_kept(tmp_path):
    for step in (2, 3, 4):
        _save(tmp_path, step)
    (tmp_path / "checkpoint-3.npz").write_bytes(b"cut")  # the newest copy kept is damaged too
    (tmp_path / "checkpoint.npz").write_bytes(b"cut")
    with pytest.raises(CheckpointError, match=r"The newest earlier one is .*checkpoint-2.npz \(step 2\)"):
        run_checkpoint.read_meta(tmp_path)


def test_a_numpy_file_of_the_checkpoints_name_that_bilm_did_not_write_is_named_as_such(tmp_path):
    np.savez(tmp_path / "checkpoint.npz", weights=np.ones(3))
    with pytest.raises(CheckpointError, match=f"{tmp_path / 'checkpoint.npz'} is not a checkpoint bilm wrote .*move "
                                              f"it out of {tmp_path}, or choose another save_dir"):
        run_checkpoint.read_meta(tmp_path)


@pytest.mark.parametrize("max_to_keep", [1, 3])
def test_a_save_never_replaces_a_file_bilm_did_not_write(tmp_path, max_to_keep):
    # The checkpoint's own name, holding the user's file since the run's last save: the save stops, naming it.
    _save(tmp_path, 2, max_to_keep)
    (tmp_path / "checkpoint.npz").write_bytes(b"my own notes")
    with pytest.raises(CheckpointError, match=f"{tmp_path / 'checkpoint.npz'} is not a readable checkpoint"):
        _save(tmp_path, 3, max_to_keep)
    assert (tmp_path / "checkpoint.npz").read_bytes() == b"my own notes"
    # A file named as a temporary save might have been is left alone: the save writes under a name of its own.
    (tmp_path / "checkpoint.npz").unlink()
    (tmp_path / "checkpoint.npz.partial").write_bytes(b"mine too")
    _save(tmp_path, 3, max_to_keep)
    assert (tmp_path / "checkpoint.npz.partial").read_bytes() == b"mine too"
    assert run_checkpoint.read_meta(tmp_path)["step"] == 3
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.npz", "checkpoint.npz.partial"]


def test_a_save_removes_what_a_save_killed_midway_left_and_nothing_else(tmp_path):
    # A process killed during a save (SIGKILL: no handler runs) leaves its temporary file; the next save removes
    # it. Names that only look alike are the user's and stay.
    _save(tmp_path, 2)
    left = tmp_path / ".checkpoint.npz.k3x_9q0a.partial"
    left.write_bytes(b"half a checkpoint")
    alike = [".checkpoint.npz.notes.partial", "checkpoint.npz.k3x_9q0a.partial", ".checkpoint.npz.k3x_9q0a.part"]
    for name in alike:
        (tmp_path / name).write_bytes(b"mine")
    _save(tmp_path, 3)
    assert not left.exists() and run_checkpoint.read_meta(tmp_path)["step"] == 3
    assert all((tmp_path / name).read_bytes() == b"mine" for name in alike)


def test_a_restart_restores_the_checkpoint_as_it_is_when_the_run_begins(tmp_path):
    # The call resolves its origin before it takes the save_dir's lock; a run that saved a newer step into the
    # same file meanwhile is what the restart continues, its step and data position with its arrays.
    from types import SimpleNamespace

    from bilm.training.run.run_directory import checkpoint_meta
    from bilm.training.run.run_origin import Restart

    _save(tmp_path, 3)
    origin = Restart(checkpoint_meta(tmp_path))
    _save(tmp_path, 5)
    restored = []
    run = SimpleNamespace(settings=SimpleNamespace(optimizer="adagrad"), restore=restored.append)
    origin.begin(run, None, None)
    assert [(meta["step"], meta["path"]) for meta in restored] == [(5, str(tmp_path / "checkpoint.npz"))]
