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
`run_directory.saved_optimizer` tells it from the names of its state where
it is missing). They restart, evaluate and dump as they did, read without
TensorFlow (`run_directory.stored_arrays`); the newest checkpoint of either
kind is the one a restart continues (`run_directory.latest_checkpoint`).
`options.json` sits beside the checkpoints in `save_dir`.
"""
import os

import numpy as np
import tensorflow as tf

from bilm.models.functional_bilm import WEIGHTS_FOLLOW
from bilm.optimizers import optimizer_class
from bilm.training.config.settings import training_settings
from bilm.training.config.training_config import data_fingerprint  # noqa: F401 (this module's name too)
from bilm.training.convert.tensorflow_state import object_paths
from bilm.training.run import run_directory
from bilm.training.run.run_checkpoint import CheckpointError
from tensorflow_reference.training_lm import TrainingLM

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


def load_training_model(options, checkpoint):
    """A `TrainingLM` (no dropout) with the weights of a checkpoint (its path or meta: `restore_training`)."""
    options, settings = training_settings(options, need_schedule=False)
    with WEIGHTS_FOLLOW.on():  # nothing drawn: the checkpoint sets every weight
        lm = TrainingLM(options, settings)
    restore_training(checkpoint, lm)
    return lm


def restore_training(checkpoint, lm, optimizer=None, lstm_states=None):
    """Assigns a checkpoint's values to `lm`'s variables (biLM, softmax, boundary state) and, where given, to the
    optimizer's state and the LSTM states; returns whether the LSTM states were restored.

    Args:
        checkpoint: its path (a run's `checkpoint.npz`, a copy kept beside
            it, or an earlier run's `jax_checkpoint.npz` or TensorFlow
            prefix), or its meta (`run_directory.checkpoint_meta`).
        lm: a `TrainingLM` of the run's options; `optimizer` its optimizer
            (None: the weights alone, to evaluate or dump);
            `lstm_states` `{state key: variable (rows, size)}`. LSTM states
            saved with another number of rows (another batch size or number
            of replicas) are left as they are (False returned).

    Raises:
        CheckpointError: the checkpoint holds another model's state, or its
            files are damaged (the variables then hold no run's state).
    """
    meta = checkpoint if isinstance(checkpoint, dict) else run_directory.checkpoint_meta(checkpoint)
    names, variables = _state_objects(lm, optimizer, lstm_states)
    states_match, missing = True, []
    for key, value in run_directory.stored_arrays(meta, names):  # one array at a time
        variable = variables[key]
        if value is None:
            missing.append(key)
            continue
        if tuple(value.shape) != tuple(variable.shape):
            if key.startswith("lstm/"):
                states_match = False
                continue
            raise CheckpointError(f"Checkpoint {meta['path']} does not match the model built from the options "
                                  f"(is options.json the one it was trained with?): {key} has shape "
                                  f"{value.shape}, the model's {tuple(variable.shape)}.")
        variable.assign(value.astype(variable.dtype.as_numpy_dtype))  # every object here is a tf.Variable
    if missing:
        raise CheckpointError(f"Checkpoint {meta['path']} does not match the model built from the options "
                              f"(is options.json the one it was trained with?): it lacks {sorted(missing)[:5]}.")
    boundary_state = run_directory.read_boundary_state(os.path.dirname(meta["path"]), meta)
    vectors, n_starts = boundary_state if boundary_state is not None else ({}, 0)
    for key, value in vectors.items():
        lm.boundary_state[key].assign(value)
    lm.n_boundary_starts.assign(n_starts)
    return states_match


def _state_objects(lm, optimizer=None, lstm_states=None):
    """`(names, variables)`: `{state key: variable}` of `lm`'s biLM and softmax variables, and of the optimizer's
    state and the LSTM states where given, under their keys in the run's checkpoint
    (`bilm.training.run.run_checkpoint`, the paths of the array step's state), and `names`, their TensorFlow
    object paths (`bilm.training.convert.tensorflow_state.object_paths`)."""
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
    return names, {key: objects[path] for key, path in names.items()}


def training_arrays(lm, optimizer, lstm_states):
    """`{state key: variable or array}`: the training state of a run on TensorFlow as the run's checkpoint holds
    it (`_state_objects`), the variables themselves (`run_checkpoint.save_checkpoint` reads them by slices),
    the optimizer's step count as the array step's int32."""
    return {key: variable.numpy().astype(np.int32) if key == "optimizer/iterations" else variable
            for key, variable in _state_objects(lm, optimizer, lstm_states)[1].items()}


def boundary_state_arrays(lm):
    """`({state key: (size,)}, n_starts)` of `lm`'s measured boundary state, or None when it has none."""
    n_starts = int(lm.n_boundary_starts.numpy())
    if not n_starts:
        return None
    return {key: variable.numpy() for key, variable in lm.boundary_state.items()}, n_starts
