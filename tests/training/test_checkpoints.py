"""Checkpoints: restarts continue exactly, state and data position, clear errors."""
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from bilm.options import load_options
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.config.settings import training_settings
from bilm.training.convert import tensorflow_state
from bilm.training.run import run_directory
from bilm.training.run.loop import train
from bilm.training.run.run_checkpoint import CheckpointError, load_checkpoint, read_file_meta, save_checkpoint
from bilm.training.run.run_directory import latest_checkpoint, load_options_latest_checkpoint, saved_optimizer
from tensorflow_reference.checkpoints import load_training_model
from training_helpers import (
    as_tensorflow_checkpoints,
    checkpoint_arrays,
    checkpoint_numbers,
    open_data,
    tiny_options,
    write_corpus,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=400, n_heldout=20)


def test_a_checkpoint_is_written_into_the_states_variables_and_another_models_writes_nothing(tmp_path):
    # A restart holds the state once: each array written into the state's own variable (TensorFlow's
    # training_ops.write_into), LSTM states of another number of rows as zeros; every shape is checked before
    # anything is written.
    from bilm.backend import training_ops

    write = training_ops().write_into
    path = save_checkpoint(tmp_path, {"a": np.ones((2, 3), np.float32), "b": np.full((4,), 2, np.float32),
                                      "lstm": {"f": np.full((2, 5), 3, np.float32)}}, 1, {}, 0)
    state = {"a": tf.Variable(np.zeros((2, 3), np.float32)), "b": tf.Variable(np.zeros((4,), np.float32)),
             "lstm": {"f": tf.Variable(np.ones((8, 5), np.float32))}}
    loaded, lstm_restored = load_checkpoint(path, state, write)
    assert loaded["a"] is state["a"] and loaded["b"] is state["b"] and loaded["lstm"]["f"] is state["lstm"]["f"]
    np.testing.assert_array_equal(state["a"].numpy(), 1.0)
    np.testing.assert_array_equal(state["b"].numpy(), 2.0)
    assert not lstm_restored and np.all(state["lstm"]["f"].numpy() == 0.0)
    other = {"a": tf.Variable(np.zeros((2, 3), np.float32)), "b": tf.Variable(np.zeros((5,), np.float32)),
             "lstm": {"f": tf.Variable(np.zeros((2, 5), np.float32))}}
    with pytest.raises(CheckpointError, match=r"b has shape \(4,\), this model's \(5,\)"):
        load_checkpoint(path, other, write)
    np.testing.assert_array_equal(other["a"].numpy(), 0.0)  # "a" (before "b") was not written either



@pytest.mark.slow
@pytest.mark.parametrize("sample_softmax, optimizer", [(True, "adagrad"), (False, "adam")])
def test_restart_continues_exactly_like_a_straight_run(tmp_path, corpus, sample_softmax, optimizer):
    # Dropout on: its masks, like the negative samples, are drawn from a
    # seed of the step, so nothing random needs checkpointing. Adam's moments
    # and count are in the checkpoint, with the optimizer's name.
    options = tiny_options(dropout=0.1, sample_softmax=sample_softmax, optimizer=optimizer)
    straight = train(options, open_data(options, corpus), 1, tmp_path / "straight", None, max_steps=6,
                     verbose=0)
    resumed_dir = tmp_path / "resumed"
    first = train(options, open_data(options, corpus), 1, resumed_dir, None, max_steps=3, checkpoint_every=2,
                  verbose=0)
    # Killed after step 3, at most the steps since the last checkpoint are lost.
    assert checkpoint_numbers(resumed_dir) == [2, 3]
    at_three = checkpoint_arrays(first["checkpoint"])
    second = train(options, open_data(options, corpus), 1, resumed_dir, None, restart_ckpt_file=first["checkpoint"],
                   max_steps=3, verbose=0)
    assert straight["step"] == second["step"] == 6

    expected, got = checkpoint_arrays(straight["checkpoint"]), checkpoint_arrays(second["checkpoint"])
    assert sorted(expected) == sorted(got)
    assert any(key.startswith("optimizer/") for key in got) and any(key.startswith("lstm_states/") for key in got)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert int(got["data/batches/.ATTRIBUTES/VARIABLE_VALUE"]) == 6
    assert any(np.abs(got[k] - at_three[k]).max() > 1e-4 for k in got if k.startswith("model/"))
    assert any("iterations" in name for name in got) == (optimizer == "adam")
    if optimizer == "adam":  # a restart keeps the checkpoint's optimizer, or says why it cannot
        with pytest.raises(CheckpointError, match="holds the state of the adam optimizer.*'optimizer': 'adagrad'"):
            train(dict(options, optimizer="adagrad"), open_data(options, corpus), 1, resumed_dir, None,
                  restart_ckpt_file=second["checkpoint"], verbose=0)


@pytest.mark.slow
def test_restart_on_new_data_with_another_batch_size(tmp_path, corpus, capsys):
    options = tiny_options()
    first = train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=3, verbose=0)
    options["batch_size"] = 8
    second = train(options, open_data(options, corpus), 1, tmp_path, None, restart_ckpt_file=first["checkpoint"],
                   max_steps=2, data_source="more data", verbose=1)
    out = capsys.readouterr().out
    assert "New training data: starting at its beginning." in out
    assert "they start from zeros" in out
    arrays = checkpoint_arrays(second["checkpoint"])
    assert int(arrays["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 5
    assert int(arrays["data/batches/.ATTRIBUTES/VARIABLE_VALUE"]) == 2
    assert arrays["lstm_states/forward_0_c/.ATTRIBUTES/VARIABLE_VALUE"].shape == (8, 16)


@pytest.mark.slow  # over 3 s
def test_the_array_step_reads_a_checkpoint_of_another_batch_size_with_its_lstm_states_from_zeros(tmp_path, corpus):
    # What JAX's and PyTorch's runs (and TensorFlow's array step) restore: a run continued with another batch size,
    # number of devices or replicas starts its LSTM states from zeros, the rest as saved.
    options = tiny_options()
    train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=3, verbose=0)
    options["batch_size"] = 8
    _, settings = training_settings(options)
    step = ArrayTrainStep(load_options(options), settings)
    meta = run_directory.run_meta(str(tmp_path))
    state, lstm_restored = run_directory.load_state(str(tmp_path), meta, step.initial_state(), step.network,
                                                    settings.optimizer)
    assert not lstm_restored
    assert {key: tuple(value.shape) for key, value in state["lstm"].items()} == {
        key: (8, size) for key, _, size in step.state_keys}
    assert all(not np.any(keras.ops.convert_to_numpy(value)) for value in state["lstm"].values())
    with np.load(meta["path"]) as saved:
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(state["softmax"]["W"]), saved["softmax/W"])
    options["lstm"]["dim"] = 32  # another model's states: refused, as before
    step = ArrayTrainStep(load_options(options), training_settings(options)[1])
    with pytest.raises(CheckpointError, match="has shape"):
        run_directory.load_state(str(tmp_path), meta, step.initial_state(), step.network, settings.optimizer)


@pytest.mark.slow  # over 3 s on two busy cores
def test_latest_checkpoint_and_options(tmp_path, corpus):
    with pytest.raises(CheckpointError, match="does not exist"):
        latest_checkpoint(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="No checkpoint found"):
        load_options_latest_checkpoint(tmp_path)
    options = tiny_options()
    result = train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=1, verbose=0)
    loaded, path = load_options_latest_checkpoint(tmp_path)
    assert path == result["checkpoint"] and isinstance(loaded, dict)
    assert loaded["lstm"] == options["lstm"] and loaded["n_tokens_vocab"] == 23

    other = tiny_options()
    other["lstm"]["dim"] = 12
    with pytest.raises(CheckpointError, match="does not match the model built from the options"):
        load_training_model(other, path)
    # The checkpoint holds the run's options too: options.json beside it is a copy for the user.
    os.remove(tmp_path / "options.json")
    assert load_options_latest_checkpoint(tmp_path) == (loaded, path)
    assert path == str(tmp_path / "checkpoint.npz")


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory, corpus):
    """A run of 4 steps saved every 2 (checkpoints 2 and 4), which each damage test copies and damages."""
    save_dir = tmp_path_factory.mktemp("four_steps")
    options = tiny_options()
    first = train(options, open_data(options, corpus), 1, save_dir, None, max_steps=4, checkpoint_every=2, verbose=0)
    assert first["checkpoint"] == str(save_dir / "checkpoint.npz") and checkpoint_numbers(save_dir) == [2, 4]
    return save_dir


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["cut short", "overwritten"])
def test_a_damaged_checkpoint_names_the_earlier_one_kept_and_doing_as_it_says_continues(tmp_path, corpus,
                                                                                        four_steps, damage):
    options = tiny_options()
    data = open_data(options, corpus)
    tmp_path = tmp_path / "run"
    shutil.copytree(four_steps, tmp_path)
    newest = tmp_path / "checkpoint.npz"
    if damage == "cut short":
        with open(newest, "r+b") as f:
            f.truncate(os.path.getsize(newest) // 2)
    else:
        newest.write_bytes(b"\0" * 1000)
    message = (f"{newest} is not a readable checkpoint of bilm .* The newest earlier one is "
               f"{tmp_path}/checkpoint-2.npz \\(step 2\\): move checkpoint.npz out of {tmp_path}, rename "
               "checkpoint-2.npz to checkpoint.npz and run again.")
    with pytest.raises(CheckpointError, match=message):
        train(options, data, 1, tmp_path, None, restart_ckpt_file=newest, max_steps=1, verbose=0)
    with pytest.raises(CheckpointError, match=message):
        latest_checkpoint(tmp_path)
    os.rename(newest, tmp_path / "damaged.npz")
    os.rename(tmp_path / "checkpoint-2.npz", newest)
    assert latest_checkpoint(tmp_path) == str(newest)
    resumed = train(options, data, 1, tmp_path, None, restart_ckpt_file=newest, max_steps=1, verbose=0)
    assert resumed["step"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["cut short", "index cut short", "data missing"])
def test_a_damaged_checkpoint_of_an_earlier_run_on_tensorflow_names_its_files_and_the_newest_readable_one(
        tmp_path, corpus, four_steps, damage):
    options = tiny_options()
    data = open_data(options, corpus)
    tmp_path = tmp_path / "run"
    shutil.copytree(four_steps, tmp_path)
    as_tensorflow_checkpoints(tmp_path)
    newest = str(tmp_path / "model.ckpt-4")
    assert latest_checkpoint(tmp_path) == newest
    data_file = newest + ".data-00000-of-00001"
    if damage == "cut short":
        with open(data_file, "r+b") as f:
            f.truncate(os.path.getsize(data_file) // 2)
    elif damage == "index cut short":
        with open(newest + ".index", "r+b") as f:
            f.truncate(10)
    else:
        os.remove(data_file)
    message = (f"Checkpoint {newest} is damaged .* The newest readable checkpoint is {tmp_path}/model.ckpt-2: move "
               f"the files of the damaged one .* out of {tmp_path} and run again")
    with pytest.raises(CheckpointError, match=message):
        train(options, data, 1, tmp_path, None, restart_ckpt_file=latest_checkpoint(tmp_path), max_steps=1,
              verbose=0)
    with pytest.raises(CheckpointError, match=message):
        load_training_model(str(tmp_path / "options.json"), newest)
    _, settings = training_settings(options)
    step = ArrayTrainStep(load_options(options), settings)
    with pytest.raises(CheckpointError, match=message):  # as JAX's and PyTorch's runs read it
        run_directory.load_state(str(tmp_path), run_directory.checkpoint_meta(newest), step.initial_state(),
                                 step.network, settings.optimizer)
    for name in os.listdir(tmp_path):
        if name.startswith("model.ckpt-4."):
            os.rename(tmp_path / name, tmp_path / f"damaged-{name}")
    assert latest_checkpoint(tmp_path) == str(tmp_path / "model.ckpt-2")
    resumed = train(options, data, 1, tmp_path, None, restart_ckpt_file=latest_checkpoint(tmp_path), max_steps=1,
                    verbose=0)
    assert resumed["step"] == 3


OPTIMIZER_NAME = "metadata/optimizer/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.mark.slow
def test_a_checkpoint_records_its_optimizer_and_a_restart_reads_it_not_a_guess(tmp_path, corpus, monkeypatch):
    options = tiny_options(optimizer="adam", learning_rate=0.01)
    data = open_data(options, corpus)
    first = train(options, data, 1, tmp_path, None, max_steps=1, verbose=0)
    assert read_file_meta(first["checkpoint"])["options"]["optimizer"] == "adam"
    monkeypatch.setattr(tensorflow_state, "checkpoint_optimizer", lambda names: pytest.fail("guessed the optimizer"))
    assert saved_optimizer(first["checkpoint"]) == "adam"
    resumed = train(options, data, 1, tmp_path, None, restart_ckpt_file=first["checkpoint"], max_steps=1, verbose=0)
    assert resumed["step"] == 2
    with pytest.raises(CheckpointError, match="holds the state of the adam optimizer.*'optimizer': 'adagrad'"):
        train(dict(options, optimizer="adagrad"), data, 1, tmp_path, None, restart_ckpt_file=resumed["checkpoint"],
              verbose=0)


@pytest.mark.slow
def test_a_checkpoint_of_the_old_layout_without_the_optimizers_name_restarts_exactly(tmp_path, corpus, monkeypatch):
    """Checkpoints written before the optimizer's name was recorded hold none: a restart tells the optimizer
    from its state's names, as it did then, and continues exactly."""
    options = tiny_options(optimizer="adam", learning_rate=0.01, dropout=0.1)
    straight = train(options, open_data(options, corpus), 1, tmp_path / "straight", None, max_steps=6, verbose=0)
    # Written as the code before the name wrote it: the same objects, without `metadata/optimizer`.
    train(options, open_data(options, corpus), 1, tmp_path / "old", None, max_steps=3, verbose=0)
    old = {"checkpoint": as_tensorflow_checkpoints(tmp_path / "old", record_optimizer=False)}
    names = tf.train.load_checkpoint(old["checkpoint"]).get_variable_to_shape_map()
    assert OPTIMIZER_NAME not in names and not any(name.startswith("metadata") for name in names)
    assert saved_optimizer(old["checkpoint"]) == "adam"
    with pytest.raises(CheckpointError, match="holds the state of the adam optimizer.*'optimizer': 'adagrad'"):
        train(dict(options, optimizer="adagrad"), open_data(options, corpus), 1, tmp_path / "old", None,
              restart_ckpt_file=old["checkpoint"], verbose=0)
    resumed = train(options, open_data(options, corpus), 1, tmp_path / "old", None,
                    restart_ckpt_file=old["checkpoint"], max_steps=3, verbose=0)
    assert resumed["step"] == straight["step"] == 6
    expected, got = checkpoint_arrays(straight["checkpoint"]), checkpoint_arrays(resumed["checkpoint"])
    assert sorted(expected) == sorted(got) and any("iterations" in name for name in got)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert saved_optimizer(resumed["checkpoint"]) == "adam"
