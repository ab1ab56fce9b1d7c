"""A run's directory, its `save_dir`, whatever wrote it: the newest checkpoint there of any backend or earlier
format (`newest_meta`, `checkpoint_meta`, `run_meta`), the checks on starting or continuing a run there
(`check_new_run`, `check_optimizer`, `check_vocabulary`) and the state read back (`stored_arrays`,
`load_state`, `read_network_weights`, `read_boundary_state`).

A checkpoint's meta (`run_checkpoint.read_meta`'s keys: `step`, `seed`,
`options`, `data_batches`, `data_source`, `vocabulary`, `path`, ...)
describes the run's `checkpoint.npz` (`bilm.training.run.run_checkpoint`),
an earlier run's `jax_checkpoint.npz`, or an earlier run's TensorFlow
checkpoint `model.ckpt-<step>` (`"format": "tensorflow"`), read without
TensorFlow (`bilm.training.convert.tensorflow_state`). Nothing here needs a
deep learning framework but `load_state`, which returns the backend's tensors.
"""
import os

import keras
import numpy as np

from bilm.io.formats.tensorflow_checkpoint import (
    TensorflowCheckpointError,
    listed_checkpoints,
    read_tensorflow_checkpoint,
)
from bilm.options.keys import option_key
from bilm.training.convert import tensorflow_state
from bilm.training.run.run_checkpoint import (
    BOUNDARY_STATE_PREFIX,
    CHECKPOINT_FILE,
    CheckpointError,
    load_checkpoint,
    read_file_meta,
    read_meta,
)


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


def _read_or_damaged(prefix, **kwargs):
    """`read_tensorflow_checkpoint(prefix, **kwargs)`, with damaged files one `CheckpointError` (`_damaged`)."""
    try:
        return read_tensorflow_checkpoint(prefix, **kwargs)
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
    """Yields `(state key, NumPy array, or None where it holds none)` of the checkpoint `meta` describes, for the
    keys of `names` (`{state key: TensorFlow object path}`, `tensorflow_state.object_paths`: where an earlier
    run's TensorFlow checkpoint stores each). An array checkpoint's are read one at a time, as they are yielded
    (a restore holds one array's copy, not the state's); an earlier TensorFlow checkpoint's all at once."""
    if meta.get("format") != tensorflow_state.FORMAT:
        with np.load(meta["path"]) as stored:
            for key in names:
                yield key, stored[key] if key in stored.files else None
        return
    keys = {tensorflow_state.checkpoint_key(name): key for key, name in names.items()}
    stored = _read_or_damaged(meta["path"], wanted=keys.__contains__)
    for key, name in names.items():
        yield key, stored.get(tensorflow_state.checkpoint_key(name))


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


def load_state(save_dir, meta, template, network, optimizer, write=None):
    """`(state, lstm_restored)`: the state of the checkpoint `meta` describes (`newest_meta`) in the structure of
    `template` (a fresh initial state of a step over `network`, trained with the optimizer named `optimizer`), as
    the backend's tensors; a checkpoint of the run's own format written into `template`'s arrays by `write`
    (`load_checkpoint`). LSTM states of another number of rows start from zeros (`lstm_restored` False)."""
    if meta.get("format") != tensorflow_state.FORMAT:
        return load_checkpoint(meta["path"], template, write)
    names = tensorflow_state.object_paths(template, [v.path for v in network.trainable_variables],
                                          [v.path for v in network.non_trainable_variables], optimizer)
    state, lstm_restored = tensorflow_state.read_tensorflow_state(meta["path"], template, names, _read_or_damaged)
    return keras.tree.map_structure(keras.ops.convert_to_tensor, state), lstm_restored


def read_network_weights(save_dir, meta, network, optimizer, softmax=None):
    """Sets `network`'s variables (a training network of the run's options) to the weights of the checkpoint
    `meta` describes (`newest_meta`; `optimizer`: the run's optimizer's name), reading nothing else of it (no
    optimizer's state, no LSTM states), one array at a time; returns `{part: NumPy array}` of the softmax's
    parts that `softmax` names with their shapes (`{"W": (V, P), "b": (V,)}`; None: none)."""
    softmax = softmax or {}
    parts = {"bilm": network.trainable_variables, "non_trainable": network.non_trainable_variables}
    template = {**{part: [0] * len(variables) for part, variables in parts.items()},
                "softmax": dict.fromkeys(softmax, 0)}
    names = tensorflow_state.object_paths(template, [v.path for v in parts["bilm"]],
                                          [v.path for v in parts["non_trainable"]], optimizer)
    read = {}
    for key, value in stored_arrays(meta, names):
        part, _, rest = key.partition("/")
        if part == "softmax":
            if value is None or tuple(value.shape) != tuple(softmax[rest]):
                raise CheckpointError(f"{meta['path']} holds another model's softmax ({rest}: "
                                      f"{None if value is None else tuple(value.shape)}, the options' "
                                      f"{tuple(softmax[rest])}); is options.json the one it was trained with?")
            read[rest] = value
            continue
        variable = parts[part][int(rest)]
        if value is None or tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(f"{meta['path']} holds another model's weights ({variable.path}"
                                  "); is options.json the one it was trained with?")
        variable.assign(value)
    return read


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
