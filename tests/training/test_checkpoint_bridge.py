"""The bridge between TensorFlow's checkpoints and the array checkpoint: every value lands where the other
backend keeps it, both ways (token inputs, Adam's step count, a softmax shared with the embedding)."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bilm.optimizers import optimizer_class
from bilm.training.config.settings import training_settings
from bilm.training.convert.tensorflow_state import object_paths, read_tensorflow_state
from bilm.training.run import run_checkpoint as array_checkpoints
from bilm.training.run import run_directory
from bilm.training.run.base_run import BaseRun
from bilm.training.run.run_origin import Restart
from bilm.training.run.run_schedule import SaveTimer
from tensorflow_reference import checkpoints
from tensorflow_reference.optimizers import make_optimizer
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import tiny_options


def _run_objects(options, seed):
    """A `TrainingLM` and its optimizer, LSTM states, step and data position, every value drawn from `seed`
    (so that a wrong mapping cannot pass by equal starts)."""
    options, settings = training_settings(options)
    lm = TrainingLM(options, settings)
    optimizer = make_optimizer(settings, lm.trainable_variables())
    lstm = {key: tf.Variable(tf.zeros([16, size])) for key, _, size in lm.state_keys}
    step = tf.Variable(0, dtype=tf.int64)
    data = {"batches": tf.Variable(0, dtype=tf.int64), "source": tf.Variable(0, dtype=tf.int64)}
    rng = np.random.default_rng(seed)
    variables = [*lm.bilm_variables().values(), *lm.softmax_variables().values(), *optimizer.accumulators.values(),
                 *lstm.values(), *lm.boundary_state.values()]
    for variable in variables:
        value = rng.integers(1, 1000, size=variable.shape) if variable.dtype.is_integer else rng.normal(
            size=variable.shape)
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))
    step.assign(int(rng.integers(1, 100)))
    data["batches"].assign(int(rng.integers(1, 100)))
    data["source"].assign(int(rng.integers(1, 2**31)))
    lm.n_boundary_starts.assign(int(rng.integers(1, 100)))
    return lm, optimizer, lstm, step, data


def _template(lm, optimizer_name, lstm):
    """The array state's structure for `lm` (as `ArrayTrainStep.initial_state()` nests it), with zeros."""
    rule = optimizer_class(optimizer_name)
    template = {"bilm": [np.zeros(v.shape, np.float32) for v in lm.network.trainable_variables],
                "non_trainable": [np.zeros(v.shape, np.float32) for v in lm.network.non_trainable_variables],
                "softmax": {k: np.zeros(v.shape, np.float32) for k, v in lm.softmax_variables().items()},
                "optimizer": {slot: {name: np.zeros(v.shape, np.float32)
                                     for name, v in lm.trainable_variables().items()} for slot in rule.slot_starts},
                "lstm": {key: np.zeros(v.shape, np.float32) for key, v in lstm.items()}}
    if rule.counts_steps:
        template["optimizer"]["iterations"] = np.zeros((), np.int32)
    return template


@pytest.mark.parametrize("extra", [{"char": False, "optimizer": "adam", "share_embedding_softmax": True},
                                   {"optimizer": "adagrad"}])
def test_values_cross_between_the_two_kinds_of_checkpoint_both_ways(tmp_path, extra):
    options = tiny_options(**extra)
    lm, optimizer, lstm, step, data = _run_objects(options, seed=1)
    manager = tf.train.CheckpointManager(checkpoints.build_checkpoint(lm, optimizer, step, lstm, data),
                                         str(tmp_path / "tf"), max_to_keep=1, checkpoint_name="model.ckpt")
    prefix = manager.save(checkpoint_number=int(step.numpy()))
    # TensorFlow's checkpoint as the array state, read with NumPy alone.
    template = _template(lm, extra["optimizer"], lstm)
    names = object_paths(template, [v.path for v in lm.network.trainable_variables],
                         [v.path for v in lm.network.non_trainable_variables], extra["optimizer"])
    state, lstm_restored = read_tensorflow_state(prefix, template, names)
    assert lstm_restored
    objects = _objects_of(lm, optimizer, lstm)
    flat = dict(zip(names, [leaf for _, leaf in keras.tree.flatten_with_path(state)]))
    assert set(names.values()) == set(objects)  # every variable, each once
    for key, path in names.items():
        np.testing.assert_array_equal(flat[key], objects[path].numpy(), err_msg=f"{key} <- {path}")
    if extra["optimizer"] == "adam":
        assert state["optimizer"]["iterations"].dtype == np.int32
    # What a run on TensorFlow writes now: the same arrays under the same keys, from its variables.
    written = {key: np.asarray(value) for key, value in checkpoints.training_arrays(lm, optimizer, lstm).items()}
    assert sorted(written) == sorted(flat)
    for key, value in written.items():
        assert value.dtype == flat[key].dtype, key
        np.testing.assert_array_equal(value, flat[key], err_msg=key)
    # And back: the state written as an array checkpoint, restored into another run's variables.
    array_dir = tmp_path / "arrays"
    array_dir.mkdir()
    boundary = ({k: v.numpy() for k, v in lm.boundary_state.items()}, int(lm.n_boundary_starts.numpy()))
    array_checkpoints.save_checkpoint(array_dir, state, int(step.numpy()), options, 0, boundary,
                                      data_batches=int(data["batches"].numpy()),
                                      data_source=int(data["source"].numpy()))
    (array_dir / "options.json").write_text(json.dumps(options))
    other = _run_objects(options, seed=2)
    path = run_directory.latest_checkpoint(array_dir)
    assert path.endswith(".npz") and run_directory.saved_optimizer(path) == extra["optimizer"]
    other_lm, other_optimizer, other_lstm, other_step, other_data = other
    assert checkpoints.restore_training(path, other_lm, other_optimizer, other_lstm)
    for (name, want), got in zip(objects.items(), _objects_of(other_lm, other_optimizer, other_lstm).values()):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
    meta = run_directory.checkpoint_meta(path)
    for want, got in ((step, meta["step"]), (data["batches"], meta["data_batches"]),
                      (data["source"], meta["data_source"]), (lm.n_boundary_starts, other_lm.n_boundary_starts)):
        assert int(got) == int(want.numpy())
    for key, value in lm.boundary_state.items():
        np.testing.assert_array_equal(other[0].boundary_state[key].numpy(), value.numpy())


def _objects_of(lm, optimizer, lstm):
    """`{TensorFlow object path: variable}` of a run's objects (`bilm.training.convert.tensorflow_state`)."""
    return {**{f"model/{k}": v for k, v in lm.bilm_variables().items()},
            **{f"softmax/{k}": v for k, v in lm.softmax_variables().items()},
            **{f"optimizer/{k}": v for k, v in optimizer.accumulators.items()},
            **{f"lstm_states/{k}": v for k, v in lstm.items()}}


def test_an_array_checkpoint_that_recorded_no_data_source_continues_its_stream_on_tensorflow(tmp_path):
    # Array checkpoints of the first format recorded no data source; JAX and PyTorch continue their stream, and so
    # does TensorFlow: the run's own data is taken as the checkpoint's, and the batches consumed are skipped.
    options = tiny_options()
    lm, optimizer, lstm, step, data = _run_objects(options, seed=1)
    prefix = tf.train.CheckpointManager(checkpoints.build_checkpoint(lm, optimizer, step, lstm, data),
                                        str(tmp_path / "tf"), max_to_keep=1, checkpoint_name="model.ckpt").save()
    template = _template(lm, "adagrad", lstm)
    names = object_paths(template, [v.path for v in lm.network.trainable_variables],
                         [v.path for v in lm.network.non_trainable_variables], "adagrad")
    state, _ = read_tensorflow_state(prefix, template, names)
    array_dir = tmp_path / "arrays"
    array_dir.mkdir()
    array_checkpoints.save_checkpoint(array_dir, state, int(step.numpy()), options, 0, data_batches=17,
                                      data_source=None)
    (array_dir / "options.json").write_text(json.dumps(options))
    path = run_directory.latest_checkpoint(array_dir)
    assert run_directory.checkpoint_meta(path)["data_source"] is None
    assert Restart(run_directory.checkpoint_meta(path)).same_data((424242,))
    # The run continues the stream from the batches the checkpoint consumed, whatever its own data's fingerprint.
    settings = training_settings(options)[1]
    run = BaseRun(settings, None, 0, SaveTimer(None), save_dir=str(array_dir), max_to_keep=1, options=options, seed=0,
                  data_fingerprints=(424242,), vocabulary=None)
    assert run.resume(run_directory.checkpoint_meta(path), True)
    assert (run.current_step, run.consumed) == (int(step.numpy()), 17)
