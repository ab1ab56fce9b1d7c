"""A training run's checkpoints on TensorFlow: TensorFlow's variables to and from the run's checkpoint that
every backend writes (`bilm.training.run.run_checkpoint`, `checkpoint.npz`), and the checkpoints of runs
written before it, read as they were.

A run's variables are stored under the paths of the array step's state
(`training_arrays`; `bilm.training.convert.tensorflow_state` names the
correspondence), and its step, data position, seed, vocabulary fingerprint
and optimizer in the checkpoint's meta.

Earlier runs on TensorFlow wrote `tf.train.Checkpoint`s (files
`model.ckpt-<step>.*`, listed in the `checkpoint` file) holding, under
stable names: `model/<layer>/<variable>` (the biLM), `softmax/W` and
`softmax/b`, `optimizer/<variable name>` (the Adagrad accumulators; Adam's
`/m`, `/v` and `optimizer/iterations`), `step`, `lstm_states/<state key>`,
`data/batches` and `data/source`, `boundary_state/<state key>` and
`boundary_state/n_starts`, and in later ones `vocabulary` (the
vocabulary's fingerprint) and `metadata/optimizer` (the optimizer's name;
`saved_optimizer` tells it from the names of its state where it is
missing). They restart, evaluate and dump as they did; the newest
checkpoint of either kind is the one a restart continues
(`latest_checkpoint`). `options.json` sits beside the checkpoints in
`save_dir`.
"""
import os

import numpy as np
import tensorflow as tf

from bilm.io.formats.tensorflow_checkpoint import listed_checkpoints
from bilm.optimizers import checkpoint_optimizer, optimizer_class
from bilm.options.keys import option_key
from bilm.training.config.settings import training_settings
from bilm.training.config.training_config import data_fingerprint  # noqa: F401 (this module's name too)
from bilm.training.convert.tensorflow_state import object_paths
from bilm.training.model.training_lm import TrainingLM
from bilm.training.run import run_checkpoint as array_checkpoints
from bilm.training.run.run_checkpoint import CheckpointError

CHECKPOINT_NAME = "model.ckpt"


def build_checkpoint(lm, optimizer=None, step=None, lstm_states=None, data_position=None):
    """A `tf.train.Checkpoint` of the given training objects, to read a run's TensorFlow checkpoint into them.

    Args:
        lm: `TrainingLM` (its biLM, softmax and boundary state).
        optimizer: a `bilm.optimizers.Optimizer`, or None.
        step: int64 scalar variable or None.
        lstm_states: `{state key: variable (rows, size)}` or None.
        data_position: `{"batches": int64 variable, "source": int64 variable}` or None.
    """
    parts = {"model": lm.bilm_variables(), "softmax": lm.softmax_variables(),
             "boundary_state": {**lm.boundary_state, "n_starts": lm.n_boundary_starts}}
    if optimizer is not None:
        parts["optimizer"] = optimizer.accumulators
    if step is not None:
        parts["step"] = step
    if lstm_states:
        parts["lstm_states"] = lstm_states
    if data_position is not None:
        parts["data"] = data_position
    return tf.train.Checkpoint(**parts)


def load_training_model(options, ckpt_file):
    """A `TrainingLM` (no dropout) with the weights of a checkpoint."""
    options, settings = training_settings(options, need_schedule=False)
    lm = TrainingLM(options, settings)
    restore_model(lm, ckpt_file)
    return lm


def restore_model(lm, checkpoint_file):
    """Assigns the biLM, softmax and boundary state variables of a checkpoint
    to `lm` (for evaluation, dumping)."""
    if _is_array_checkpoint(checkpoint_file):
        _restore_arrays(checkpoint_file, lm)
        return
    _restore(build_checkpoint(lm), checkpoint_file)


def restore_training(checkpoint_file, lm, optimizer, step, lstm_states, data_position, data_source=None):
    """Restores a full training state; returns whether the LSTM states were restored.

    LSTM states saved with another number of rows (a different batch size or
    number of replicas) are left at zero instead of failing. `data_source`
    (the fingerprint of the run's data) is taken as the data an array
    checkpoint read where it recorded none (its first format), so the run
    continues its stream, as it does on JAX and PyTorch.
    """
    saved = saved_optimizer(checkpoint_file)
    if saved != lm.settings.optimizer:
        raise CheckpointError(
            f"Checkpoint {checkpoint_file} holds the state of the {saved} optimizer, but the options say "
            f"'optimizer': {lm.settings.optimizer!r}; a run keeps its optimizer (set it back to {saved!r}, "
            "or start a new run in another save_dir).")
    if _is_array_checkpoint(checkpoint_file):
        return _restore_arrays(checkpoint_file, lm, optimizer, step, lstm_states, data_position, data_source)
    saved_shapes = _reader(checkpoint_file).get_variable_to_shape_map()
    states_match = all(
        saved_shapes.get(f"lstm_states/{key}/.ATTRIBUTES/VARIABLE_VALUE") == list(variable.shape)
        for key, variable in lstm_states.items())
    checkpoint = build_checkpoint(lm, optimizer, step, lstm_states if states_match else None, data_position)
    _restore(checkpoint, checkpoint_file)
    return states_match


# What reading a checkpoint whose files were cut short or corrupted raises.
_DAMAGE = (IndexError, tf.errors.OpError)


def _restore(checkpoint, checkpoint_file):
    try:
        status = checkpoint.read(checkpoint_file)
        status.assert_existing_objects_matched()
        # Values of the file that the objects do not use (the optimizer when
        # evaluating, `save_counter`) are expected; silence their warnings.
        status.expect_partial()
    except (AssertionError, ValueError, *_DAMAGE) as e:
        check_readable(checkpoint_file)
        raise CheckpointError(
            f"Checkpoint {checkpoint_file} does not match the model built from the options "
            f"(is options.json the one it was trained with?): {e}") from None


def _read_all(checkpoint_file):
    reader = tf.train.load_checkpoint(checkpoint_file)
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
    return reader


def check_readable(checkpoint_file):
    """Reads every value of a checkpoint; returns its reader, or raises CheckpointError when its files are
    damaged (cut short, corrupted, missing), naming them and the newest readable checkpoint beside it."""
    try:
        return _read_all(checkpoint_file)
    except _DAMAGE as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    directory = os.path.dirname(checkpoint_file)
    usable = None
    for path in reversed(listed_checkpoints(directory)):
        if path != checkpoint_file:
            try:
                _read_all(path)
                usable = path
                break
            except _DAMAGE:
                continue
    files = f"{checkpoint_file}.index and {checkpoint_file}.data-*"
    advice = (f"The newest readable checkpoint is {usable}: move the files of the damaged one ({files}) out of "
              f"{directory} and run again, and it continues from {os.path.basename(usable)}."
              if usable else f"No other checkpoint in {directory} is readable; train again.")
    raise CheckpointError(f"Checkpoint {checkpoint_file} is damaged (its files are cut short or corrupted: "
                          f"{reason}). {advice}")


def _reader(checkpoint_file):
    """`tf.train.load_checkpoint`, with damaged files a CheckpointError (see `check_readable`)."""
    try:
        return tf.train.load_checkpoint(checkpoint_file)
    except _DAMAGE:
        return check_readable(checkpoint_file)


_OPTIMIZER_NAME = "metadata/optimizer/.ATTRIBUTES/VARIABLE_VALUE"


def saved_optimizer(checkpoint_file):
    """The name of the optimizer whose state `checkpoint_file` holds: the one it records, or in a checkpoint
    written before the name was recorded, the one its state's names tell (`bilm.optimizers.checkpoint_optimizer`)."""
    if _is_array_checkpoint(checkpoint_file):
        return _array_meta(checkpoint_file)["options"].get("optimizer") or option_key("optimizer").default
    reader = _reader(checkpoint_file)
    names = reader.get_variable_to_shape_map()
    if _OPTIMIZER_NAME in names:
        return reader.get_tensor(_OPTIMIZER_NAME).decode("utf-8")
    return checkpoint_optimizer(names)


# === A run's array checkpoint (JAX's and PyTorch's), read into the variables ===

def _is_array_checkpoint(checkpoint_file):
    return os.fspath(checkpoint_file).endswith(".npz")


def _array_meta(checkpoint_file):
    meta = array_checkpoints.read_file_meta(os.fspath(checkpoint_file))
    if meta is None:
        raise CheckpointError(f"Checkpoint {checkpoint_file} does not exist.")
    return meta


def _state_variables(lm, optimizer=None, lstm_states=None):
    """`{state key: variable}`: `lm`'s biLM and softmax variables, and the optimizer's state and LSTM states where
    given, under their keys in the run's checkpoint (`bilm.training.run.run_checkpoint`), which are the paths of
    the array step's state (`bilm.training.convert.tensorflow_state` names the correspondence)."""
    network = lm.network
    template = {"bilm": [0] * len(network.trainable_variables),
                "non_trainable": [0] * len(network.non_trainable_variables),
                "softmax": dict.fromkeys(lm.softmax_variables(), 0)}
    objects = {**{f"model/{name}": v for name, v in lm.bilm_variables().items()},
               **{f"softmax/{name}": v for name, v in lm.softmax_variables().items()}}
    if optimizer is not None:
        rule = optimizer_class(lm.settings.optimizer)
        template["optimizer"] = {slot: dict.fromkeys(lm.trainable_variables(), 0) for slot in rule.slot_starts}
        if rule.counts_steps:
            template["optimizer"]["iterations"] = 0
        objects.update({f"optimizer/{name}": v for name, v in optimizer.accumulators.items()})
    if lstm_states:
        template["lstm"] = dict.fromkeys(lstm_states, 0)
        objects.update({f"lstm_states/{key}": v for key, v in lstm_states.items()})
    names = object_paths(template, [v.path for v in network.trainable_variables],
                         [v.path for v in network.non_trainable_variables], lm.settings.optimizer)
    unsaved = sorted(set(objects) - set(names.values()))
    if unsaved:  # state a checkpoint would not hold: a restart would lose it
        raise CheckpointError(
            f"The {lm.settings.optimizer} optimizer keeps state that its slot_starts and counts_steps do not "
            f"declare ({', '.join(unsaved[:3])}), which a checkpoint would not hold; declare every slot of its "
            "state in slot_starts, and its step count as counts_steps (accumulators['iterations']).")
    return {key: objects[path] for key, path in names.items()}


def training_arrays(lm, optimizer, lstm_states):
    """`{state key: variable or array}`: the training state of a run on TensorFlow as the run's checkpoint holds
    it (`_state_variables`), the variables themselves (`run_checkpoint.save_checkpoint` reads them by slices),
    the optimizer's step count as the array step's int32."""
    return {key: variable.numpy().astype(np.int32) if key == "optimizer/iterations" else variable
            for key, variable in _state_variables(lm, optimizer, lstm_states).items()}


def boundary_state_arrays(lm):
    """`({state key: (size,)}, n_starts)` of `lm`'s measured boundary state, or None when it has none."""
    n_starts = int(lm.n_boundary_starts.numpy())
    if not n_starts:
        return None
    return {key: variable.numpy() for key, variable in lm.boundary_state.items()}, n_starts


def _restore_arrays(checkpoint_file, lm, optimizer=None, step=None, lstm_states=None, data_position=None,
                    data_source=None):
    """Assigns the values of the array checkpoint `checkpoint_file` to `lm`'s variables (biLM, softmax, boundary
    state) and to those given; returns whether the LSTM states were restored (another number of rows: left as
    they are)."""
    meta = _array_meta(checkpoint_file)
    variables = _state_variables(lm, optimizer, lstm_states)
    states_match = True
    with np.load(checkpoint_file) as stored:
        missing = sorted(key for key in variables if key not in stored.files)
        if missing:
            raise CheckpointError(f"Checkpoint {checkpoint_file} does not match the model built from the options "
                                  f"(is options.json the one it was trained with?): it lacks {missing[:5]}.")
        for key, variable in variables.items():
            value = stored[key]
            if tuple(value.shape) != tuple(variable.shape):
                if key.startswith("lstm/"):
                    states_match = False
                    continue
                raise CheckpointError(f"Checkpoint {checkpoint_file} does not match the model built from the options "
                                      f"(is options.json the one it was trained with?): {key} has shape "
                                      f"{value.shape}, the model's {tuple(variable.shape)}.")
            variable.assign(value.astype(variable.dtype.as_numpy_dtype))  # every object here is a tf.Variable
    if step is not None:
        step.assign(meta["step"])
    if data_position is not None:
        data_position["batches"].assign(meta["data_batches"])
        source = meta["data_source"] if meta["data_source"] is not None else data_source
        if source is not None:
            data_position["source"].assign(source)
    boundary_state = array_checkpoints.read_boundary_state(os.path.dirname(os.fspath(checkpoint_file)), meta)
    vectors, n_starts = boundary_state if boundary_state is not None else ({}, 0)
    for key, value in vectors.items():
        lm.boundary_state[key].assign(value)
    lm.n_boundary_starts.assign(n_starts)
    return states_match
