"""TensorFlow's checkpoint files read with NumPy alone equal what TensorFlow's own reader gives."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.io.formats.tensorflow_checkpoint import (
    TensorflowCheckpointError,
    listed_checkpoints,
    read_tensorflow_checkpoint,
)


def _write(directory, max_to_keep=2, saves=3):
    """A managed checkpoint of variables of every dtype a training checkpoint holds, names with `.` and `/`,
    saved `saves` times (each save changes the values); returns the manager."""
    rng = np.random.default_rng(0)
    parts = {
        "model": {"char_cnn/char.embedding": tf.Variable(rng.normal(size=(261, 4)).astype(np.float32)),
                  "lstm/bias": tf.Variable(rng.normal(size=(64,)).astype(np.float32))},
        "step": tf.Variable(7, dtype=tf.int64),
        "counts": tf.Variable(np.arange(5, dtype=np.int32)),
        "flags": tf.Variable([True, False, True]),
        "metadata": {"optimizer": tf.Variable("adagrad", dtype=tf.string),
                     "names": tf.Variable(["", "a", "b" * 300], dtype=tf.string)},
        "half": tf.Variable(np.linspace(-2, 2, 7).astype(np.float16)),
    }
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**parts), str(directory), max_to_keep=max_to_keep,
                                         checkpoint_name="model.ckpt")
    for number in range(saves):
        parts["step"].assign(number + 1)
        parts["model"]["lstm/bias"].assign_add(tf.ones(64))
        manager.save(checkpoint_number=number + 1)
    return manager


def test_every_tensor_equals_tensorflows_reader(tmp_path):
    manager = _write(tmp_path)
    prefix = manager.latest_checkpoint
    want = tf.train.load_checkpoint(prefix)
    got = read_tensorflow_checkpoint(prefix)
    assert sorted(got) == sorted(want.get_variable_to_shape_map())
    assert len(got) == 10  # the eight variables, the save counter and the object graph
    for name in got:
        expected = want.get_tensor(name)
        if got[name].dtype == object:  # strings
            np.testing.assert_array_equal(got[name], np.asarray(expected, dtype=object), err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
            assert got[name].dtype == np.asarray(expected).dtype, name
    assert got["step/.ATTRIBUTES/VARIABLE_VALUE"] == 3
    assert got["metadata/optimizer/.ATTRIBUTES/VARIABLE_VALUE"][()] == b"adagrad"
    # Some tensors alone, by name.
    some = read_tensorflow_checkpoint(prefix, wanted=lambda name: name.startswith("model/"))
    assert sorted(some) == ["model/char_cnn.Schar..embedding/.ATTRIBUTES/VARIABLE_VALUE",
                            "model/lstm.Sbias/.ATTRIBUTES/VARIABLE_VALUE"]


def test_the_listed_checkpoints_are_tensorflows(tmp_path):
    manager = _write(tmp_path, max_to_keep=2, saves=3)
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert listed_checkpoints(tmp_path) == list(state.all_model_checkpoint_paths) == manager.checkpoints
    assert listed_checkpoints(tmp_path)[-1] == state.model_checkpoint_path
    # A listed checkpoint whose files were moved away is not listed.
    for path in tmp_path.glob("model.ckpt-3.*"):
        path.unlink()
    assert listed_checkpoints(tmp_path) == [str(tmp_path / "model.ckpt-2")]
    assert listed_checkpoints(tmp_path / "nothing_here") == []


def test_damaged_files_are_one_error_naming_them(tmp_path):
    prefix = _write(tmp_path).latest_checkpoint
    data_file = f"{prefix}.data-00000-of-00001"
    with open(data_file, "r+b") as f:
        f.truncate(100)
    with pytest.raises(TensorflowCheckpointError, match=r"data-00000-of-00001 is cut short .* is damaged"):
        read_tensorflow_checkpoint(prefix)
    index = prefix + ".index"
    with open(index, "r+b") as f:
        f.truncate(30)
    with pytest.raises(TensorflowCheckpointError, match=r"model.ckpt-3.index is not a TensorFlow checkpoint index"):
        read_tensorflow_checkpoint(prefix)
    with pytest.raises(TensorflowCheckpointError, match=r"model.ckpt-9.index is missing"):
        read_tensorflow_checkpoint(tmp_path / "model.ckpt-9")
