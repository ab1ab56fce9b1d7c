"""A training run's checkpoint, one format that every backend writes and reads: the run's whole state as arrays
(weights, softmax, optimizer, LSTM states), the steps taken and the run's options, in one `.npz` file of the save
directory (`checkpoint.npz`), with the boundary state measured at a run's end (`bilm.models.boundary_state`)
once there is one.

The file is written under a temporary name and renamed, so a `kill -9`
loses at most the save in progress, never the last checkpoint. Arrays are
stored under their path in the state (`bilm/3`, `optimizer/accumulators/
softmax/W`, ...): the state of the array step (`ArrayTrainStep.initial_state()`),
which every backend trains with. They are read back into
the structure of a fresh state, so a checkpoint of another model is an
error naming what differs. A state is any nest of dicts and lists of
arrays (`keras.tree`), read back as the backend's tensors. The boundary
state is stored beside the state, under `boundary_state/<state key>`
(`(size,)` float32) with its number of starts in the meta.

Files written before this format was shared are read as they were: JAX's and
PyTorch's `jax_checkpoint.npz` (formats 1, without a boundary state, and 2),
and TensorFlow's `model.ckpt-<step>`; which of a `save_dir`'s checkpoints a
run continues, and the checks on it, are `bilm.training.run.run_directory`'s.
Reading a checkpoint's meta (`read_meta`) needs no deep learning framework.
"""
import json
import os
import re
import shutil
import tempfile
import zipfile

import keras
import numpy as np

from bilm.errors import UserError

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
    previous = read_file_meta(path)  # the checkpoint this one replaces must be bilm's (else: an error naming it)
    kept = None
    if keeps_older and previous is not None and previous["step"] != int(step):
        kept = _numbered_path(save_dir, previous["step"])
        if os.path.exists(kept) and not _written_by_bilm(kept):
            raise CheckpointError(f"{kept} is where the checkpoint of step {previous['step']} is kept, and it holds "
                                  f"a file bilm did not write; move it out of {save_dir} and run again.")
    _remove_unfinished_saves(save_dir)
    # Written under a name of its own (no file of the user's is replaced), then renamed over the last checkpoint.
    descriptor, temporary = tempfile.mkstemp(prefix=f".{CHECKPOINT_FILE}.", suffix=".partial", dir=save_dir)
    try:
        with os.fdopen(descriptor, "wb") as f:
            _write_arrays(f, {"__meta__": np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays})
            f.flush()
            os.fsync(f.fileno())
        if kept is not None:
            _keep_a_copy(path, kept)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    if keeps_older and max_to_keep is not None:
        for _, old in kept_checkpoints(save_dir)[:-(max_to_keep - 1)]:
            os.remove(old)
    return path


def _stored_shape(stored, key):
    """The shape of array `key` of the open `.npz` file `stored` (an `np.load` result), from its header alone."""
    with stored.zip.open(key + ".npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        return tuple(read_header(member)[0])


def _remove_unfinished_saves(save_dir):
    """Removes the temporary files of saves that never finished (a process killed mid-save: no handler ran):
    the names `tempfile.mkstemp` gave them, `.<CHECKPOINT_FILE>.<8 random characters>.partial`. The run holds
    `save_dir`'s lock, so no other save of bilm's is writing one."""
    pattern = re.compile(re.escape(f".{CHECKPOINT_FILE}.") + r"[a-z0-9_]{8}" + re.escape(".partial"))
    for name in os.listdir(save_dir):
        if pattern.fullmatch(name):
            os.remove(os.path.join(os.fspath(save_dir), name))


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


def read_arrays(path):
    """`{key: NumPy array}` of the checkpoint file `path`: its state (`bilm/<i>`, `softmax/W`, `optimizer/...`,
    `lstm/...`) and its boundary state (`boundary_state/...`), without the meta (`read_file_meta`)."""
    with np.load(path) as stored:
        return {key: stored[key] for key in stored.files if key != "__meta__"}


def load_checkpoint(path, template, write=None):
    """`(state, lstm_restored)`: the state stored in the checkpoint file `path`, in the structure of `template` (a
    fresh initial state), as the backend's tensors. LSTM states of another number of rows (another batch size,
    or number of devices or replicas) are zeros (`lstm_restored` False).

    `write(leaf, value)` puts each stored array (NumPy, the leaf's shape) where the template's leaf was and
    returns it (the backend's `training_ops().write_into`: in place where the backend's state is mutable, so
    that the state is held once; None: a new tensor of each value). Every name and shape is checked first, from
    the file's headers: nothing is written from another model's checkpoint."""
    write = write or (lambda leaf, value: keras.ops.convert_to_tensor(value))
    lstm_restored = True
    leaves = _flattened(template)
    with np.load(path) as f:
        stored = {key for key in f.files if key != "__meta__" and not key.startswith(BOUNDARY_STATE_PREFIX)}
        wanted = {key for key, _ in leaves}
        if stored != wanted:
            raise CheckpointError(
                f"{path} holds another model's state: it lacks {sorted(wanted - stored)[:5]} and has "
                f"{sorted(stored - wanted)[:5]} besides. Train into another --save_dir.")
        zeros = set()  # LSTM states of another number of rows
        for key, leaf in leaves:
            shape = _stored_shape(f, key)
            if shape != tuple(leaf.shape):
                if key.startswith("lstm/") and shape[1:] == tuple(leaf.shape)[1:]:
                    lstm_restored = False
                    zeros.add(key)
                else:
                    raise CheckpointError(f"{path}: {key} has shape {shape}, this model's {tuple(leaf.shape)}.")
        values = [write(leaf, np.zeros(tuple(leaf.shape), keras.backend.standardize_dtype(leaf.dtype))
                        if key in zeros else f[key]) for key, leaf in leaves]
    return keras.tree.pack_sequence_as(template, values), lstm_restored
