"""Training checkpoints: what they hold, where they live, how they are restored.

A checkpoint (`tf.train.Checkpoint`, files `model.ckpt-<step>.*` managed by
`tf.train.CheckpointManager`) holds, under stable names:
- `model/<layer>/<variable>`: the biLM (`char_cnn/char_embedding`, ...),
- `softmax/W`, `softmax/b`,
- `optimizer/<variable name>`: the Adagrad accumulators (`optimizer: "adam"`:
  `optimizer/<variable name>/m` and `/v`, and `optimizer/iterations`),
- `step`: optimizer steps taken so far,
- `lstm_states/<state key>`: the carried LSTM states, one row per batch row,
- `data/batches`, `data/source`: how many batches of which data stream
  (a fingerprint of its description) were consumed, so that a restart on
  the same data continues where it stopped,
- `boundary_state/<state key>`, `boundary_state/n_starts`: the mean LSTM
  state at sentence starts (`bilm.models.boundary_state`), set at the end
  of each `train` call,
- `vocabulary`: the training vocabulary's fingerprint
  (`bilm.text.Vocabulary.fingerprint`), so that a restart or an evaluation
  with another vocabulary is refused (checkpoints written before it was
  added have none; they are read without the check),
- `metadata/optimizer`: the name of the optimizer whose state `optimizer/`
  holds (`bilm.optimizers.OPTIMIZERS`), so that a restart keeps it
  (checkpoints written before it was added have none: `saved_optimizer`
  tells the optimizer from the names of its state, as they were told).
`options.json` sits beside the checkpoints in `save_dir`.

A run continued here from JAX or PyTorch leaves its array checkpoint
(`bilm.training.jax.checkpoints`) beside these; the newest of either kind is
the one a restart continues (`latest_checkpoint`), read into the same
variables (`bilm.training.convert.tensorflow_state` names them).
"""
import os

import numpy as np
import tensorflow as tf

from bilm.errors import UserError
from bilm.optimizers import checkpoint_optimizer, optimizer_class
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.config.training_config import data_fingerprint  # noqa: F401 (this module's name too)
from bilm.training.convert.tensorflow_state import object_paths
from bilm.training.jax import checkpoints as array_checkpoints
from bilm.training.model.training_lm import TrainingLM

CHECKPOINT_NAME = "model.ckpt"
OPTIONS_FILE = "options.json"


class CheckpointError(UserError):
    """A save_dir has no checkpoint, or a checkpoint does not match the options."""


def build_checkpoint(lm, optimizer=None, step=None, lstm_states=None, data_position=None, vocabulary=None, *,
                     for_restore=False):
    """A `tf.train.Checkpoint` of the given training objects.

    With an optimizer, a checkpoint to write also records its name
    (`metadata/optimizer`); one to restore from (`for_restore`) leaves it
    out, as the name is read, not restored (`saved_optimizer`), and a
    checkpoint written before it was recorded has none.

    Args:
        lm: `TrainingLM` (its biLM, softmax and boundary state).
        optimizer: a `bilm.optimizers.Optimizer`, or None.
        step: int64 scalar variable or None.
        lstm_states: `{state key: variable (rows, size)}` or None.
        data_position: `{"batches": int64 variable, "source": int64 variable}` or None.
        vocabulary: int64 scalar variable (the vocabulary's fingerprint) or
            None; only written, never restored (`read_state_summary` reads it).
    """
    parts = {"model": lm.bilm_variables(), "softmax": lm.softmax_variables(),
             "boundary_state": {**lm.boundary_state, "n_starts": lm.n_boundary_starts}}
    if optimizer is not None:
        parts["optimizer"] = optimizer.accumulators
        if not for_restore:
            parts["metadata"] = {"optimizer": tf.Variable(optimizer.name, dtype=tf.string, trainable=False,
                                                          name="optimizer_name")}
    if step is not None:
        parts["step"] = step
    if lstm_states:
        parts["lstm_states"] = lstm_states
    if data_position is not None:
        parts["data"] = data_position
    if vocabulary is not None:
        parts["vocabulary"] = vocabulary
    return tf.train.Checkpoint(**parts)


def listed_checkpoints(save_dir):
    """The checkpoint prefixes that `save_dir`'s `checkpoint` file lists and whose index exists, oldest first."""
    state = tf.train.get_checkpoint_state(os.fspath(save_dir))
    if state is None:
        return []
    paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    if state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return [path for path in paths if os.path.exists(path + ".index")]


def held_checkpoints(save_dir):
    """`listed_checkpoints`, and the array checkpoint of a run continued on JAX or PyTorch where there is one."""
    held = listed_checkpoints(save_dir)
    if array_checkpoints.read_meta(save_dir) is not None:
        held.append(array_checkpoints.checkpoint_path(save_dir))
    return held


def latest_checkpoint(save_dir):
    """The newest checkpoint prefix in `save_dir` whose files are there (after a damaged newest one's
    files were moved away, the one before it), or the run's array checkpoint (a `.npz` file, written on JAX or
    PyTorch) where it has taken more steps; a clear error when there is none."""
    save_dir = os.fspath(save_dir)
    if not os.path.isdir(save_dir):
        raise CheckpointError(f"save_dir {save_dir} does not exist; train first with bin/train_elmo.py.")
    listed = listed_checkpoints(save_dir)
    path = listed[-1] if listed else None
    arrays = array_checkpoints.read_meta(save_dir)
    if arrays is not None and (path is None or arrays["step"] > read_state_summary(path)["step"]):
        return array_checkpoints.checkpoint_path(save_dir)
    if path is None:
        raise CheckpointError(
            f"No checkpoint found in {save_dir} (expected {CHECKPOINT_NAME}-<step>.index and a "
            "'checkpoint' file); train first with bin/train_elmo.py, or convert a TF1 checkpoint.")
    return path


def load_training_options(save_dir):
    """The `BiLMOptions` saved in a training directory by `train`."""
    options_file = os.path.join(os.fspath(save_dir), OPTIONS_FILE)
    if not os.path.exists(options_file):
        raise CheckpointError(
            f"{options_file} not found: the training options are saved there by train(); "
            "copy the options file used for training to that name.")
    return load_options(options_file)


def load_options_latest_checkpoint(save_dir):
    """`(options dict, checkpoint prefix)` of a training directory, as bilm-tf returns them."""
    path = latest_checkpoint(save_dir)
    return load_training_options(save_dir).to_dict(), path


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
    checkpoint = build_checkpoint(lm, optimizer, step, lstm_states if states_match else None, data_position,
                                  for_restore=True)
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


def read_state_summary(checkpoint_file):
    """`{"step", "data_batches", "data_source", "vocabulary"}` ints of a checkpoint, without building a
    model; `vocabulary` (the fingerprint) is None in a checkpoint that has none (an array checkpoint's too)."""
    if _is_array_checkpoint(checkpoint_file):
        meta = array_checkpoints.read_meta(os.path.dirname(checkpoint_file))
        return {"step": meta["step"], "data_batches": meta["data_batches"], "data_source": meta["data_source"],
                "vocabulary": None}
    reader = _reader(checkpoint_file)
    names = reader.get_variable_to_shape_map()
    summary = {}
    try:
        for key, name in (("step", "step"), ("data_batches", "data/batches"), ("data_source", "data/source"),
                          ("vocabulary", "vocabulary")):
            name += "/.ATTRIBUTES/VARIABLE_VALUE"
            summary[key] = int(reader.get_tensor(name)) if name in names else (None if key == "vocabulary" else 0)
    except _DAMAGE:
        check_readable(checkpoint_file)
        raise
    return summary


_OPTIMIZER_NAME = "metadata/optimizer/.ATTRIBUTES/VARIABLE_VALUE"


def saved_optimizer(checkpoint_file):
    """The name of the optimizer whose state `checkpoint_file` holds: the one it records, or in a checkpoint
    written before the name was recorded, the one its state's names tell (`bilm.optimizers.checkpoint_optimizer`)."""
    if _is_array_checkpoint(checkpoint_file):
        return training_settings(_array_meta(checkpoint_file)["options"], need_schedule=False)[1].optimizer
    reader = _reader(checkpoint_file)
    names = reader.get_variable_to_shape_map()
    if _OPTIMIZER_NAME in names:
        return reader.get_tensor(_OPTIMIZER_NAME).decode("utf-8")
    return checkpoint_optimizer(names)


def check_vocabulary(checkpoint_file, vocab):
    """Raises CheckpointError when `vocab` (a `Vocabulary`) is not the one `checkpoint_file` was trained with.

    Checks the size against the softmax's rows, and the fingerprint where the
    checkpoint records one.
    """
    saved = read_state_summary(checkpoint_file)["vocabulary"]
    if _is_array_checkpoint(checkpoint_file):
        rows = [_array_meta(checkpoint_file)["options"].get("n_tokens_vocab")]
    else:
        rows = _reader(checkpoint_file).get_variable_to_shape_map().get("softmax/b/.ATTRIBUTES/VARIABLE_VALUE")
    if rows is not None and rows[0] != vocab.size:
        raise CheckpointError(
            f"{vocab.filename} has {vocab.size:,} tokens but {checkpoint_file} was trained with a vocabulary of "
            f"{rows[0]:,}; give the training vocabulary (--vocab_file).")
    if saved is not None and saved != vocab.fingerprint:
        raise CheckpointError(
            f"{vocab.filename} is not the vocabulary {checkpoint_file} was trained with (same size, other tokens "
            "or another order): every id would mean another word. Give the training vocabulary (--vocab_file).")


# === A run's array checkpoint (JAX's and PyTorch's), read into the variables ===

def _is_array_checkpoint(checkpoint_file):
    return os.fspath(checkpoint_file).endswith(".npz")


def _array_meta(checkpoint_file):
    return array_checkpoints.read_meta(os.path.dirname(os.fspath(checkpoint_file)))


def _restore_arrays(checkpoint_file, lm, optimizer=None, step=None, lstm_states=None, data_position=None,
                    data_source=None):
    """Assigns the values of the array checkpoint `checkpoint_file` to `lm`'s variables (biLM, softmax, boundary
    state) and to those given; returns whether the LSTM states were restored (another number of rows: left as
    they are)."""
    meta = _array_meta(checkpoint_file)
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
    states_match = True
    with np.load(checkpoint_file) as stored:
        missing = sorted(key for key in names if key not in stored.files)
        if missing:
            raise CheckpointError(f"Checkpoint {checkpoint_file} does not match the model built from the options "
                                  f"(is options.json the one it was trained with?): it lacks {missing[:5]}.")
        for key, path in names.items():
            variable, value = objects[path], stored[key]
            if tuple(value.shape) != tuple(variable.shape):
                if key.startswith("lstm/"):
                    states_match = False
                    continue
                raise CheckpointError(f"Checkpoint {checkpoint_file}: {key} has shape {value.shape}, the model's "
                                      f"{tuple(variable.shape)} (is options.json the one it was trained with?).")
            variable.assign(value.astype(variable.dtype.as_numpy_dtype))  # every object here is a tf.Variable
    if step is not None:
        step.assign(meta["step"])
    if data_position is not None:
        data_position["batches"].assign(meta["data_batches"])
        source = meta["data_source"] if meta["data_source"] is not None else data_source
        if source is not None:
            data_position["source"].assign(source)
    boundary_state = array_checkpoints.read_boundary_state(os.path.dirname(os.fspath(checkpoint_file)))
    vectors, n_starts = boundary_state if boundary_state is not None else ({}, 0)
    for key, value in vectors.items():
        lm.boundary_state[key].assign(value)
    lm.n_boundary_starts.assign(n_starts)
    return states_match
