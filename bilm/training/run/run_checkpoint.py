"""A training run's checkpoint, one format that every backend writes and reads: the run's whole state as arrays
(weights, softmax, optimizer, LSTM states), the steps taken and the run's options, in one `.npz` file of the save
directory (`checkpoint.npz`), with the boundary state measured at a run's end (`bilm.models.boundary_state`)
once there is one.

The file is written under a temporary name and renamed, so a `kill -9`
loses at most the save in progress, never the last checkpoint. Arrays are
stored under their path in the state (`bilm/3`, `optimizer/accumulators/
softmax/W`, ...): the state of the array step (`JaxTrainStep.initial_state()`
on JAX and PyTorch), and TensorFlow's variables under the same paths
(`bilm.training.run.checkpoints.training_arrays`). They are read back into
the structure of a fresh state, so a checkpoint of another model is an
error naming what differs. A state is any nest of dicts and lists of
arrays (`keras.tree`), read back as the backend's tensors. The boundary
state is stored beside the state, under `boundary_state/<state key>`
(`(size,)` float32) with its number of starts in the meta.

Files written before this format was shared are read as they were: JAX's and
PyTorch's `jax_checkpoint.npz` (formats 1, without a boundary state, and 2),
and TensorFlow's `model.ckpt-<step>` (`bilm.training.convert.tensorflow_state`).
Reading a checkpoint's options (`read_meta`) and boundary state
(`read_boundary_state`) needs no deep learning framework.
"""
import json
import os
import re
import shutil
import zipfile

import keras
import numpy as np

from bilm.errors import UserError
from bilm.io.formats.tensorflow_checkpoint import (
    TensorflowCheckpointError,
    listed_checkpoints,
    read_tensorflow_checkpoint,
)
from bilm.options.keys import option_key
from bilm.training.convert import tensorflow_state

CHECKPOINT_FILE = "checkpoint.npz"
# Where JAX's and PyTorch's runs wrote it before every backend did (read, never written).
EARLIER_CHECKPOINT_FILE = "jax_checkpoint.npz"
OPTIONS_FILE = "options.json"  # the run's training options, beside its checkpoint
FORMAT = "bilm-checkpoint-3"
# The formats this code reads: the first has no boundary state, the first two no vocabulary fingerprint.
READABLE_FORMATS = ("bilm-jax-checkpoint-1", "bilm-jax-checkpoint-2", FORMAT)
BOUNDARY_STATE_PREFIX = "boundary_state/"
CHUNK_BYTES = 16 * 2 ** 20  # the most of an array a save copies at a time


class CheckpointError(UserError):
    """A save_dir has no checkpoint, or a checkpoint is unreadable or does not match the options."""


def checkpoint_path(save_dir):
    """Where the checkpoint of the run in `save_dir` lives."""
    return os.path.join(os.fspath(save_dir), CHECKPOINT_FILE)


def check_new_run(save_dir):
    """Refuses a new run into a `save_dir` that holds a run's checkpoint (of any backend: `newest_meta`), with one
    line on how to continue it: a new run never continues another one by chance."""
    meta = newest_meta(save_dir)
    if meta is not None:
        raise CheckpointError(f"{save_dir} already holds a run's checkpoint ({meta['path']}, step "
                              f"{meta['step']}). Continue it with bin/restart.py --save_dir {save_dir} (train(..., "
                              "restart_ckpt_file=save_dir)), or choose a new save_dir.")


def run_meta(save_dir):
    """`newest_meta(save_dir)` of a run's directory that must hold a checkpoint (to continue, evaluate or dump
    it), or a `CheckpointError` saying how to get one there."""
    save_dir = os.fspath(save_dir)
    if not os.path.isdir(save_dir):
        raise CheckpointError(f"save_dir {save_dir} does not exist; train first with bin/train_elmo.py.")
    meta = newest_meta(save_dir)
    if meta is None:
        raise CheckpointError(f"No checkpoint found in {save_dir} (expected {CHECKPOINT_FILE}, or an earlier run's "
                              "jax_checkpoint.npz or model.ckpt-<step>.index and 'checkpoint' file); train first "
                              "with bin/train_elmo.py, or convert a TF1 checkpoint.")
    return meta


def _flattened(state):
    """`[(key, leaf)]` of a nest of dicts and lists of arrays, keyed by their path (`bilm/3`,
    `optimizer/accumulators/softmax/W`, ...)."""
    return [("/".join(str(part) for part in path), leaf) for path, leaf in keras.tree.flatten_with_path(state)]


def save_checkpoint(save_dir, state, step, options, seed, boundary_state=None, *, data_batches=None,
                    data_source=None, vocabulary=None, max_to_keep=1):
    """Writes `state` after `step` steps, with the run's training `options` (a dict), `seed` (an int, or None
    where the run has none) and `boundary_state` (`({state key: (size,)}, n_starts)` or None: not measured
    yet); returns the path.

    `state` is a nest of arrays (the backend's tensors or variables, or
    NumPy arrays), each read as it is written, a slice of at most
    `CHUNK_BYTES` at a time: the save holds a few megabytes of copies, not
    the state's.

    `data_batches` (default `step`) and `data_source` (the stream's
    fingerprint, or None) say how far into which stream the run is, so that
    a restart on other data starts it anew; `vocabulary` is the training
    vocabulary's fingerprint (`bilm.text.Vocabulary.fingerprint`; None: the
    data has no vocabulary file), so that a restart or an evaluation with
    another vocabulary is refused. With `max_to_keep` above 1 (None: all),
    the checkpoint this one replaces stays as `checkpoint-<step>.npz`
    (`kept_checkpoints`), the newest `max_to_keep - 1` of them.
    """
    path = checkpoint_path(save_dir)
    arrays = dict(_flattened(state))
    meta = {"format": FORMAT, "step": int(step), "seed": None if seed is None else int(seed), "options": options,
            "n_boundary_starts": 0, "data_batches": int(step if data_batches is None else data_batches),
            "data_source": data_source, "vocabulary": vocabulary}
    if boundary_state is not None:
        vectors, n_starts = boundary_state
        arrays.update({BOUNDARY_STATE_PREFIX + key: np.asarray(value, np.float32) for key, value in vectors.items()})
        meta["n_boundary_starts"] = int(n_starts)
    keeps_older = max_to_keep is None or max_to_keep > 1
    previous = read_file_meta(path) if keeps_older else None
    kept = None
    if previous is not None and previous["step"] != int(step):
        kept = _numbered_path(save_dir, previous["step"])
        if os.path.exists(kept) and not _written_by_bilm(kept):
            raise CheckpointError(f"{kept} is where the checkpoint of step {previous['step']} is kept, and it holds "
                                  f"a file bilm did not write; move it out of {save_dir} and run again.")
    temporary = path + ".partial"
    with open(temporary, "wb") as f:
        _write_arrays(f, {"__meta__": np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays})
        f.flush()
        os.fsync(f.fileno())
    if kept is not None:
        _keep_a_copy(path, kept)
    os.replace(temporary, path)
    if keeps_older and max_to_keep is not None:
        for _, old in kept_checkpoints(save_dir)[:-(max_to_keep - 1)]:
            os.remove(old)
    return path


def _write_arrays(file, arrays):
    """`np.savez`'s file (`<key>.npy` members of an uncompressed zip) of `arrays` `{key: array}` (the backend's
    tensors or variables, or NumPy arrays), each read and written by slices along its first axis of at most
    `CHUNK_BYTES`."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, leaf in arrays.items():
            dtype = np.dtype(keras.backend.standardize_dtype(leaf.dtype))
            shape = tuple(int(n) for n in leaf.shape)
            with archive.open(key + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_2_0(member, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                             "fortran_order": False, "shape": shape})
                if not shape:
                    member.write(np.asarray(keras.ops.convert_to_numpy(leaf), dtype).tobytes())
                    continue
                rows = max(1, CHUNK_BYTES // max(1, dtype.itemsize * int(np.prod(shape[1:]))))
                for start in range(0, shape[0], rows):
                    part = keras.ops.convert_to_numpy(leaf[start:start + rows])
                    member.write(np.ascontiguousarray(part, dtype).tobytes())


def _numbered_path(save_dir, step):
    stem, extension = os.path.splitext(CHECKPOINT_FILE)
    return os.path.join(os.fspath(save_dir), f"{stem}-{int(step)}{extension}")


def kept_checkpoints(save_dir):
    """`[(step, path)]` of the earlier checkpoints kept beside the run's latest (`max_to_keep`), oldest first:
    the readable checkpoints of bilm named `checkpoint-<step>.npz` (a file of that name bilm did not write, or a
    damaged one, is not among them, and is never removed)."""
    stem, extension = os.path.splitext(CHECKPOINT_FILE)
    pattern = re.compile(re.escape(stem) + r"-(\d+)" + re.escape(extension))
    found = [(int(match.group(1)), os.path.join(os.fspath(save_dir), name))
             for name in os.listdir(save_dir) for match in [pattern.fullmatch(name)] if match]
    return sorted((step, path) for step, path in found if _written_by_bilm(path))


def _written_by_bilm(path):
    """Whether `path` is a readable checkpoint of bilm."""
    meta = _stored_meta(path)
    return isinstance(meta, dict) and meta.get("format") in READABLE_FORMATS


def _keep_a_copy(path, kept):
    """`path`'s file also under the name `kept` (a hard link; a copy where the file system has none)."""
    if os.path.exists(kept):
        os.remove(kept)
    try:
        os.link(path, kept)
    except OSError:
        shutil.copyfile(path, kept)


def read_meta(save_dir):
    """`{"step", "seed", "options", "data_batches", "data_source", "vocabulary", "path", ...}` of the run's
    checkpoint in `save_dir` (`path`: its file, `checkpoint.npz`, or where a run wrote it before,
    `jax_checkpoint.npz`), or None when there is none. In a checkpoint written before they were recorded,
    `data_batches` is `step`, and `data_source` and `vocabulary` are None. A damaged file is a
    `CheckpointError` naming the newest earlier one kept beside it."""
    for name in (CHECKPOINT_FILE, EARLIER_CHECKPOINT_FILE):
        meta = read_file_meta(os.path.join(os.fspath(save_dir), name))
        if meta is not None:
            return meta
    return None


def read_file_meta(path):
    """`read_meta` of the checkpoint file `path` (a run's latest or a copy kept beside it); None if there is none."""
    if not os.path.exists(path):
        return None
    meta = _stored_meta(path)
    if isinstance(meta, KeyError):  # a readable .npz, without bilm's meta: someone else's file
        raise CheckpointError(f"{path} is not a checkpoint bilm wrote (a NumPy file without its meta); move it out "
                              f"of {os.path.dirname(path)}, or choose another save_dir.")
    if isinstance(meta, Exception):
        raise CheckpointError(f"{path} is not a readable checkpoint of bilm (its file is cut short or damaged: "
                              f"{meta}). {_advice(path)}")
    if meta.get("format") not in READABLE_FORMATS:
        raise CheckpointError(f"{path} is not a checkpoint of bilm (format {meta.get('format')!r}).")
    meta.setdefault("data_batches", meta["step"])
    meta.setdefault("data_source", None)
    meta.setdefault("vocabulary", None)
    meta["path"] = path
    return meta


def _stored_meta(path):
    """The meta dict stored in `path`, or the error that reading it raised."""
    try:
        with np.load(path) as f:
            return json.loads(f["__meta__"].tobytes().decode())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        return error


def _advice(path):
    """What to do about the damaged checkpoint `path`: the newest earlier one kept beside it, if any."""
    directory = os.path.dirname(path)
    kept = kept_checkpoints(directory)
    if not kept:
        return f"No earlier checkpoint is kept in {directory}; train again."
    return (f"The newest earlier one is {kept[-1][1]} (step {kept[-1][0]}): move {os.path.basename(path)} out of "
            f"{directory}, rename {os.path.basename(kept[-1][1])} to {CHECKPOINT_FILE} and run again.")


def newest_meta(save_dir):
    """The meta of the newest checkpoint in `save_dir` of either format: the array checkpoint's (`read_meta`), or a
    run's on TensorFlow (`tensorflow_state.prefix_meta`: `"format": "tensorflow"`, its `"path"`), whichever
    has taken more steps (the array checkpoint at a tie); None when there is none. A run moved from one backend
    to another leaves both in its directory."""
    listed = listed_checkpoints(save_dir)
    arrays, tensorflow = read_meta(save_dir), _tensorflow_meta(listed[-1]) if listed else None
    if tensorflow is None or (arrays is not None and arrays["step"] >= tensorflow["step"]):
        return arrays
    return tensorflow


def latest_checkpoint(save_dir):
    """The path of the newest checkpoint of the run in `save_dir` (`run_meta`): `checkpoint.npz`, or an earlier
    run's `jax_checkpoint.npz` or TensorFlow prefix `model.ckpt-<step>` where it has taken more steps."""
    return run_meta(save_dir)["path"]


def load_options_latest_checkpoint(save_dir):
    """`(options dict, checkpoint path)` of a training directory, as bilm-tf returns them: the options of its
    newest checkpoint (`run_meta`), which `options.json` beside it holds too."""
    meta = run_meta(save_dir)
    return dict(meta["options"]), meta["path"]


def checkpoint_meta(path):
    """The meta of the checkpoint a restart names (`read_meta`'s keys): a run's directory (its newest checkpoint,
    `newest_meta`), a checkpoint file (`checkpoint.npz`, a kept copy, an earlier run's `jax_checkpoint.npz`) or an
    earlier run's TensorFlow checkpoint prefix (`model.ckpt-<step>`); a `CheckpointError` where there is none."""
    path = os.fspath(path)
    if path.endswith(".npz"):
        meta = read_file_meta(path)
    elif os.path.exists(path + ".index"):
        meta = _tensorflow_meta(path)
    else:
        return run_meta(path)
    if meta is None:
        raise CheckpointError(f"{path} is not a checkpoint ({CHECKPOINT_FILE}, a copy kept beside it, or an earlier "
                              "run's jax_checkpoint.npz or model.ckpt-<step>); give the run's save_dir.")
    return meta


def _tensorflow_meta(prefix):
    """`tensorflow_state.prefix_meta`, with damaged files one `CheckpointError` (`_damaged`)."""
    try:
        return tensorflow_state.prefix_meta(prefix)
    except tensorflow_state.MissingOptionsError:
        raise
    except TensorflowCheckpointError as error:
        raise _damaged(prefix, error) from None


def _damaged(prefix, error):
    """The `CheckpointError` of TensorFlow checkpoint `prefix` whose files are damaged (`error`), naming the newest
    readable TensorFlow checkpoint beside it (whose values all read) and how to continue from it."""
    directory = os.path.dirname(os.fspath(prefix))
    usable = None
    for path in reversed(listed_checkpoints(directory)):
        try:
            if path != prefix and read_tensorflow_checkpoint(path) is not None:
                usable = path
                break
        except TensorflowCheckpointError:
            continue
    advice = (f"The newest readable checkpoint is {usable}: move the files of the damaged one ({prefix}.index and "
              f"{prefix}.data-*) out of {directory} and run again, and it continues from {os.path.basename(usable)}."
              if usable else f"No other checkpoint in {directory} is readable; train again.")
    return CheckpointError(f"Checkpoint {prefix} is damaged (its files are cut short or corrupted: {error}). {advice}")


def saved_optimizer(checkpoint):
    """The name of the optimizer whose state a checkpoint (its path, or its meta: `checkpoint_meta`) holds: the
    run's options' (a TensorFlow checkpoint's recorded name, or before it recorded one, what its state's names
    tell: `tensorflow_state.prefix_meta`)."""
    meta = checkpoint if isinstance(checkpoint, dict) else checkpoint_meta(checkpoint)
    return meta.get("optimizer") or meta["options"].get("optimizer") or option_key("optimizer").default


def check_optimizer(meta, optimizer):
    """Refuses to continue the checkpoint `meta` describes with another optimizer than the one whose state it
    holds (`saved_optimizer`): a run keeps its optimizer."""
    saved = saved_optimizer(meta)
    if saved != optimizer:
        raise CheckpointError(
            f"Checkpoint {meta['path']} holds the state of the {saved} optimizer, but the options say 'optimizer': "
            f"{optimizer!r}; a run keeps its optimizer (set it back to {saved!r}, or start a new run in another "
            "save_dir).")


def stored_arrays(meta, names):
    """`{state key: NumPy array, or None where it holds none}` of the checkpoint `meta` describes, for the keys
    of `names` (`{state key: TensorFlow object path}`, `tensorflow_state.object_paths`: where an earlier run's
    TensorFlow checkpoint stores each)."""
    if meta.get("format") != tensorflow_state.FORMAT:
        with np.load(meta["path"]) as stored:
            return {key: stored[key] if key in stored.files else None for key in names}
    keys = {tensorflow_state.checkpoint_key(name): key for key, name in names.items()}
    try:
        stored = read_tensorflow_checkpoint(meta["path"], wanted=keys.__contains__)
    except TensorflowCheckpointError as error:
        raise _damaged(meta["path"], error) from None
    return {key: stored.get(tensorflow_state.checkpoint_key(name)) for key, name in names.items()}


def read_arrays(path):
    """`{key: NumPy array}` of the checkpoint file `path`: its state (`bilm/<i>`, `softmax/W`, `optimizer/...`,
    `lstm/...`) and its boundary state (`boundary_state/...`), without the meta (`read_file_meta`)."""
    with np.load(path) as stored:
        return {key: stored[key] for key in stored.files if key != "__meta__"}


def check_vocabulary(meta, vocab):
    """Raises `CheckpointError` when `vocab` (a `Vocabulary`) is not the one the checkpoint `meta` describes
    (`read_meta`, `newest_meta`) was trained with: its size against the options' `n_tokens_vocab`, and its
    fingerprint where the checkpoint records one."""
    rows = meta["options"].get("n_tokens_vocab")
    if rows is not None and rows != vocab.size:
        raise CheckpointError(
            f"{vocab.filename} has {vocab.size:,} tokens but {meta['path']} was trained with a vocabulary of "
            f"{rows:,}; give the training vocabulary (--vocab_file).")
    if meta.get("vocabulary") is not None and meta["vocabulary"] != vocab.fingerprint:
        raise CheckpointError(
            f"{vocab.filename} is not the vocabulary {meta['path']} was trained with (same size, other tokens "
            "or another order): every id would mean another word. Give the training vocabulary (--vocab_file).")


def load_state(save_dir, meta, template, network, optimizer):
    """`(state, lstm_restored)`: the state of the checkpoint `meta` describes (`newest_meta`) in the structure of
    `template` (a fresh initial state of a step over `network`, trained with the optimizer named `optimizer`), as
    the backend's tensors. A TensorFlow checkpoint's LSTM states of another number of rows start from zeros
    (`lstm_restored` False)."""
    if meta.get("format") != tensorflow_state.FORMAT:
        return load_checkpoint(meta["path"], template), True
    names = tensorflow_state.object_paths(template, [v.path for v in network.trainable_variables],
                                          [v.path for v in network.non_trainable_variables], optimizer)
    state, lstm_restored = tensorflow_state.read_tensorflow_state(meta["path"], template, names)
    return keras.tree.map_structure(keras.ops.convert_to_tensor, state), lstm_restored


def read_network_weights(save_dir, meta, network, optimizer):
    """Sets `network`'s variables (a training network of the run's options) to the weights of the checkpoint
    `meta` describes (`newest_meta`; `optimizer`: the run's optimizer's name)."""
    parts = {"bilm": network.trainable_variables, "non_trainable": network.non_trainable_variables}
    template = {part: [0] * len(variables) for part, variables in parts.items()}
    names = tensorflow_state.object_paths(template, [v.path for v in parts["bilm"]],
                                          [v.path for v in parts["non_trainable"]], optimizer)
    value_of = stored_arrays(meta, names)
    for part, variables in parts.items():
        for i, variable in enumerate(variables):
            value = value_of[f"{part}/{i}"]
            if value is None or tuple(value.shape) != tuple(variable.shape):
                raise CheckpointError(f"{meta['path']} holds another model's weights ({variable.path}"
                                         "); is options.json the one it was trained with?")
            variable.assign(value)


def read_boundary_state(save_dir, meta=None):
    """The boundary state stored in the checkpoint `meta` describes (default: `save_dir`'s array checkpoint):
    `({state key: float32 (size,)}, n_starts)`, or None when it has none (not measured yet, or a checkpoint of
    the first format)."""
    meta = read_meta(save_dir) if meta is None else meta
    if meta is None or not meta.get("n_boundary_starts"):
        return None
    if meta.get("format") == tensorflow_state.FORMAT:
        return tensorflow_state.read_tensorflow_boundary_state(meta["path"], meta["n_boundary_starts"])
    with np.load(meta["path"]) as f:
        vectors = {key[len(BOUNDARY_STATE_PREFIX):]: f[key] for key in f.files if key.startswith(BOUNDARY_STATE_PREFIX)}
    return vectors, int(meta["n_boundary_starts"])


def load_checkpoint(path, template):
    """The state stored in the checkpoint file `path`, in the structure of `template` (a fresh initial state), as
    the backend's tensors."""
    leaves = _flattened(template)
    with np.load(path) as f:
        stored = {key for key in f.files if key != "__meta__" and not key.startswith(BOUNDARY_STATE_PREFIX)}
        wanted = {key for key, _ in leaves}
        if stored != wanted:
            raise CheckpointError(
                f"{path} holds another model's state: it lacks {sorted(wanted - stored)[:5]} and has "
                f"{sorted(stored - wanted)[:5]} besides. Train into another --save_dir.")
        values = []
        for key, leaf in leaves:
            value = f[key]
            if value.shape != tuple(leaf.shape):
                raise CheckpointError(f"{path}: {key} has shape {value.shape}, this model's {tuple(leaf.shape)}.")
            values.append(keras.ops.convert_to_tensor(value))
    return keras.tree.pack_sequence_as(template, values)
