"""TensorFlow's names of a run's values: a state key of the run's checkpoint (`bilm.training.run.run_checkpoint`)
to and from the object path of TensorFlow's variables, by which TensorFlow's run writes and reads that
checkpoint, and an earlier run's TensorFlow checkpoint (`model.ckpt-<step>`) is read as the state of arrays on
any backend, with NumPy alone.

The two hold the same values under other names. A state key (a path in
`ArrayTrainStep.initial_state()`) names its TensorFlow checkpoint object
(`object_paths`):

    bilm/<i>                       model/<i-th trainable variable's path>
    non_trainable/<i>              model/<i-th non-trainable variable's path>
    softmax/W, softmax/b           softmax/W, softmax/b
    optimizer/<slot>/<parameter>   optimizer/<Optimizer.accumulator_key(parameter, slot)>
    optimizer/iterations           optimizer/iterations (int64 there, int32 here)
    lstm/<state key>               lstm_states/<state key>

and the run's scalars are `step`, `data/batches`, `data/source` and
`boundary_state/<state key>` with `boundary_state/n_starts`. A TensorFlow
checkpoint does not record the run's seed (`meta["seed"]` is None: the
continuing run's own is taken).
"""
import json
import os

import keras
import numpy as np

from bilm.io.formats.tensorflow_checkpoint import (
    TensorflowCheckpointError,
    read_tensorflow_checkpoint,
)
from bilm.optimizers import checkpoint_optimizer, optimizer_class

FORMAT = "tensorflow"


class MissingOptionsError(TensorflowCheckpointError):
    """A TensorFlow checkpoint without the run's `options.json` beside it (its files may be sound)."""


OPTIONS_FILE = "options.json"
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"  # the suffix of a variable's value in a TensorFlow checkpoint
_SCALARS = {"step": "step", "data_batches": "data/batches", "data_source": "data/source",
            "n_boundary_starts": "boundary_state/n_starts", "vocabulary": "vocabulary",
            "optimizer": "metadata/optimizer"}


_OPTIMIZER = "metadata/optimizer" + _VALUE


def checkpoint_key(object_path):
    """The key of a variable's value in a TensorFlow checkpoint, from its object path (`model/char_cnn/...`):
    each name of the path with `.` written `..` and `/` written `.S`."""
    head, _, name = object_path.partition("/")
    return f"{head}/{name.replace('.', '..').replace('/', '.S')}{_VALUE}" if name else head + _VALUE


def object_paths(template, trainable_names, non_trainable_names, optimizer):
    """`{state key: TensorFlow object path}` of a state `template` (a nest of arrays, `ArrayTrainStep`'s), whose
    network's variables have the paths `trainable_names` and `non_trainable_names` (in the network's order),
    trained with the optimizer named `optimizer`."""
    accumulator_key = optimizer_class(optimizer).accumulator_key
    paths = {}
    for path, _ in keras.tree.flatten_with_path(template):
        part, rest = path[0], tuple(str(p) for p in path[1:])
        if part == "bilm":
            target = "model/" + trainable_names[int(rest[0])]
        elif part == "non_trainable":
            target = "model/" + non_trainable_names[int(rest[0])]
        elif part == "optimizer" and rest != ("iterations",):
            target = "optimizer/" + accumulator_key(rest[1], rest[0])
        else:
            target = {"softmax": "softmax", "optimizer": "optimizer", "lstm": "lstm_states"}[part] + "/" + rest[0]
        paths["/".join((part, *rest))] = target
    return paths


def prefix_meta(prefix):
    """The meta of TensorFlow checkpoint `prefix`, as `bilm.training.run.run_checkpoint.read_meta` gives an array
    checkpoint's (`"format": "tensorflow"`, its `"path"` prefix, `"seed"` None; the options are those of
    `options.json` beside it)."""
    wanted = {checkpoint_key(name): key for key, name in _SCALARS.items()}
    names = []  # every name the checkpoint holds, read from its index
    values = read_tensorflow_checkpoint(prefix, wanted=lambda name: names.append(name) or name in wanted)
    meta = {wanted[name]: int(value) for name, value in values.items() if name != _OPTIMIZER}
    # The optimizer whose state it holds: the name it records, or before it recorded one, what its state's names tell.
    meta["optimizer"] = (values[_OPTIMIZER].item().decode("utf-8") if _OPTIMIZER in values
                         else checkpoint_optimizer(names))
    options_file = os.path.join(os.path.dirname(os.fspath(prefix)), OPTIONS_FILE)
    try:
        with open(options_file, encoding="utf-8") as f:
            options = json.load(f)
    except FileNotFoundError:
        raise MissingOptionsError(f"{options_file} not found: a run's options are saved there beside its "
                                  "checkpoints; copy the options file it was trained with to that name.") from None
    return {"format": FORMAT, "path": os.fspath(prefix), "seed": None, "options": options, "n_boundary_starts": 0,
            "data_batches": 0, "data_source": None, "vocabulary": None, **meta}


def read_tensorflow_state(prefix, template, names, read=read_tensorflow_checkpoint):
    """The state stored in TensorFlow checkpoint `prefix` in the structure of `template`, as NumPy arrays.

    Args:
        names: `object_paths(template, ...)`.
        read: `read_tensorflow_checkpoint` or a function of the same call (one that names what to do about a
            damaged checkpoint).

    Returns:
        `(state, lstm_restored)`: LSTM states saved with another number of
        rows (another batch size or number of devices) start from zeros, as
        on TensorFlow (`lstm_restored` False).
    """
    stored = read(prefix)
    values, lstm_restored = [], True
    for key, leaf in _leaves(template):
        name = checkpoint_key(names[key])
        if name not in stored:
            raise TensorflowCheckpointError(f"{prefix} holds another model's state: it lacks {names[key]} ({key}); is "
                                     "options.json the one it was trained with?")
        value = stored[name]
        if value.shape != tuple(leaf.shape):
            if key.startswith("lstm/"):
                lstm_restored, value = False, np.zeros(leaf.shape, np.float32)
            else:
                raise TensorflowCheckpointError(f"{prefix}: {names[key]} has shape {value.shape}, this model's "
                                         f"{tuple(leaf.shape)}.")
        values.append(value.astype(keras.backend.standardize_dtype(leaf.dtype)))
    return keras.tree.pack_sequence_as(template, values), lstm_restored


def read_tensorflow_boundary_state(prefix, n_starts):
    """`({state key: float32 (size,)}, n_starts)` of checkpoint `prefix`, or None when `n_starts` is 0."""
    if not n_starts:
        return None
    head = "boundary_state/"
    stored = read_tensorflow_checkpoint(prefix, wanted=lambda name: name.startswith(head))
    vectors = {name[len(head):-len(_VALUE)]: value for name, value in stored.items()
               if name != checkpoint_key("boundary_state/n_starts")}
    return vectors, int(n_starts)


def _leaves(template):
    return [("/".join(str(p) for p in path), leaf) for path, leaf in keras.tree.flatten_with_path(template)]
