"""Weights in the original bilm-tf HDF5 layout (docs/formats.md, "Weight files").

The name map is a table of `WeightEntry` rows built from the model; every
quirk of the original layout is a named hook, applied only here:
- `char_embed` has 261 rows (a model's own character dictionary: its rows);
  a prediction model's table has a zero row 0 in front (ids are shifted by
  +1 so that 0 means padding); bilm's `word_embed` (models that read words
  too) likewise;
- `W_cnn_i` keeps TF1's conv2d shape `(1, width, char_dim, num)`;
- `W_0` is `[W_x; W_h]` stacked on the input axis (TF1 LSTMCell concatenates
  `[x_t, h_{t-1}]` before one matmul).
The file is opened once per load or save.
"""
import contextlib
import dataclasses
import os
import shutil
from typing import Callable, Tuple

import h5py
import numpy as np

from bilm.errors import UserError
from bilm.io.formats.output_files import KIND_ATTRIBUTE, atomic_output, check_output_file

# The scope of each LSTM stack in the file: `RNN_0` is the forward one.
RNN_SCOPES = (("forward", "RNN_0"), ("backward", "RNN_1"))
# Extra datasets beside the weights (docs/formats.md, "Boundary state"):
# `{state key: float32 (size,)}` and an attribute `n_starts`.
BOUNDARY_STATE_GROUP = "boundary_state"
# bilm's addition for models published with a learned scalar mix (TF-Hub
# modules): `W` `(n_layers + 1,)` and `gamma` `(1,)`, see `read_scalar_mix`.
SCALAR_MIX_GROUP = "scalar_mix"
WEIGHTS_KIND = "weights"
TOKEN_EMBEDDINGS_KIND = "token_embeddings"


class WeightFileError(UserError):
    """A weight file is missing, unreadable, or does not match the model."""


@dataclasses.dataclass
class WeightEntry:
    """One dataset of the file: its name, shape, and how it maps to the model."""

    name: str
    shape: Tuple[int, ...]
    get: Callable[[], np.ndarray]
    set: Callable[[np.ndarray], None]


# === Hooks: file array <-> model variables ===

def _conv_kernel_entry(name, variable):
    """TF1 conv2d kernel `(1, width, char_dim, num)` <-> conv1d `(width, char_dim, num)`."""
    return WeightEntry(
        name, (1, *variable.shape),
        lambda: variable.numpy()[np.newaxis],
        lambda array: variable.assign(array[0]))


def _lstm_kernel_entry(name, input_kernel, recurrent_kernel):
    """`W_0` `(input_dim + output_dim, 4 * units)` = input kernel over recurrent kernel."""
    n_input = input_kernel.shape[0]

    def set_(array):
        input_kernel.assign(array[:n_input])
        recurrent_kernel.assign(array[n_input:])

    return WeightEntry(
        name, (n_input + recurrent_kernel.shape[0], input_kernel.shape[1]),
        lambda: np.concatenate([input_kernel.numpy(), recurrent_kernel.numpy()]), set_)


def _direct_entry(name, variable):
    return WeightEntry(name, tuple(variable.shape), variable.numpy, variable.assign)


def padded_embedding_entry(name, variable, file_rows):
    """A table whose file copy lacks the model's zero padding rows in front."""
    extra = variable.shape[0] - file_rows

    def set_(array):
        variable.assign(np.concatenate([np.zeros((extra, array.shape[1]), array.dtype), array]))

    return WeightEntry(name, (file_rows, variable.shape[1]), lambda: variable.numpy()[extra:], set_)


# === The table ===

def weight_table(model):
    """Every dataset of the original weight file, for a model of `build_bilm`.

    Returns a list of `WeightEntry` in file order. The token embedding of a
    token-input model is not part of it (it lives in its own file, see
    `load_token_embeddings`).
    """
    layers = {layer.name: layer for layer in model.layers}
    # A prediction model's tables have a zero row 0 that the file does not hold.
    padded = int(layers["sequence_mask"].padded)
    entries = []
    if "char_cnn" in layers:
        cnn = layers["char_cnn"]
        table = cnn.char_embedding
        entries.append(padded_embedding_entry("char_embed", table, table.shape[0] - padded))
        if "word_embedding" in layers:
            table = layers["word_embedding"].embeddings
            entries.append(padded_embedding_entry("word_embed", table, table.shape[0] - padded))
        for i, (kernel, bias) in enumerate(zip(cnn.kernels, cnn.biases)):
            entries.append(_conv_kernel_entry(f"CNN/W_cnn_{i}", kernel))
            entries.append(_direct_entry(f"CNN/b_cnn_{i}", bias))
        highway = layers["highway"]
        for k in range(highway.n_layers):
            entries += [
                _direct_entry(f"CNN_high_{k}/W_carry", highway.carry_kernels[k]),
                _direct_entry(f"CNN_high_{k}/b_carry", highway.carry_biases[k]),
                _direct_entry(f"CNN_high_{k}/W_transform", highway.transform_kernels[k]),
                _direct_entry(f"CNN_high_{k}/b_transform", highway.transform_biases[k]),
            ]
        if "token_projection" in layers:
            projection = layers["token_projection"]
            entries.append(_direct_entry("CNN_proj/W_proj", projection.kernel))
            entries.append(_direct_entry("CNN_proj/b_proj", projection.bias))
    for direction, scope in RNN_SCOPES:
        layer = 0
        while f"{direction}_lstm_{layer}" in layers:
            lstm = layers[f"{direction}_lstm_{layer}"]
            prefix = f"{scope}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            entries.append(_lstm_kernel_entry(f"{prefix}/W_0", lstm.input_kernel, lstm.recurrent_kernel))
            entries.append(_direct_entry(f"{prefix}/B", lstm.bias))
            if lstm.projection_kernel is not None:
                entries.append(_direct_entry(f"{prefix}/W_P_0", lstm.projection_kernel))
            layer += 1
    return entries


# === Reading and writing ===

def open_for_reading(path, what="Weight file"):
    """`h5py.File(path, "r")`, or a `WeightFileError` naming `path` and `what` it should be."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise WeightFileError(f"{what} not found: {path}")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise WeightFileError(
            f"{path} is not a readable HDF5 {what.lower()} ({e}); it may be truncated or corrupt (an "
            "interrupted download or copy). Download or write it again.") from None


def read_entries(path, entries, what="Weight file"):
    """Reads and checks every entry's dataset; returns `{name: array}`.

    Raises `WeightFileError` listing each missing dataset and each shape
    mismatch (dataset name, shape in the file, shape the options imply).
    """
    problems, arrays = [], {}
    with open_for_reading(path, what) as f:
        for entry in entries:
            dataset = f.get(entry.name)
            if not isinstance(dataset, h5py.Dataset):
                problems.append(f"missing dataset '{entry.name}' (expected shape {entry.shape})")
            elif tuple(dataset.shape) != tuple(entry.shape):
                problems.append(
                    f"dataset '{entry.name}' has shape {tuple(dataset.shape)}, expected {tuple(entry.shape)}")
            else:
                arrays[entry.name] = dataset[...]
    if problems:
        if not arrays and all(problem.startswith("missing") for problem in problems):
            raise WeightFileError(f"{path} holds none of the model's datasets ({entries[0].name!r}, ...): it is not "
                                  "a biLM weight file. Give the model's HDF5 weights.")
        shown = problems[:5] + ([f"and {len(problems) - 5} more"] if len(problems) > 5 else [])
        raise WeightFileError(
            f"{path} does not match the model built from the options file "
            "(is it the weight file for these options?): " + "; ".join(shown) + ".")
    return arrays


def load_bilm_weights(model, weight_file):
    """Assigns the weights of an original-layout HDF5 file to `model`."""
    entries = weight_table(model)
    arrays = read_entries(weight_file, entries)
    for entry in entries:
        entry.set(arrays[entry.name])


def write_datasets(path, arrays, kind, boundary_state=None):
    """Writes `{name: array}` as float32 datasets, atomically, stamped as a bilm file of `kind`.

    The file is written under a temporary name and renamed at the end, so a
    crash never leaves a complete-looking file behind. The root attribute
    `bilm_file` (see `bilm.io.formats.output_files`) is the only addition to the
    original layout; readers of that layout ignore it, as they ignore a
    `boundary_state` `({state key: (size,)}, n_starts)` written beside the
    weights (see `read_boundary_state`).
    """
    with atomic_output(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs[KIND_ATTRIBUTE] = kind
        for name, array in arrays.items():
            f.create_dataset(name, data=np.asarray(array, dtype=np.float32))
        if boundary_state is not None:
            write_boundary_state(f, *boundary_state)


def save_bilm_weights(model, weight_file, boundary_state=None):
    """Writes `model`'s weights in the original layout (readable by bilm-tf and
    AllenNLP), with `boundary_state` `({state key: (size,)}, n_starts)` if given."""
    write_datasets(weight_file, {entry.name: entry.get() for entry in weight_table(model)}, kind=WEIGHTS_KIND,
                   boundary_state=boundary_state)


def read_token_embeddings(embedding_file):
    """The `embedding` dataset `(n_vocab, projection_dim)` of a token embedding file."""
    with open_for_reading(embedding_file, "Token embedding file") as f:
        dataset = f.get("embedding")
        if not isinstance(dataset, h5py.Dataset) or len(dataset.shape) != 2:
            raise WeightFileError(
                f"{embedding_file}: expected a 2-D dataset 'embedding' (n_vocab, projection_dim); "
                f"found {list(f.keys())}.")
        return dataset[...]


def load_token_embeddings(model, embedding_file):
    """Assigns a token embedding file to a token-input model's `token_embedding` table."""
    variable = model.get_layer("token_embedding").embeddings
    file_rows = variable.shape[0] - 1
    entry = padded_embedding_entry("embedding", variable, file_rows)
    arrays = read_entries(embedding_file, [entry], what="Token embedding file")
    entry.set(arrays["embedding"])


def copy_with_boundary_state(weight_file, out_path, boundary_state, n_starts, overwrite=False):
    """Writes a copy of `weight_file` holding `boundary_state` too.

    The copy is written under a temporary name and renamed; it must not be
    `weight_file`, and an existing `out_path` is replaced only if bilm wrote
    it as a weight file (or with `overwrite=True`).
    """
    out_path = check_output_file(out_path, [weight_file], kind=WEIGHTS_KIND, overwrite=overwrite)
    with atomic_output(out_path) as tmp:
        shutil.copyfile(weight_file, tmp)
        with h5py.File(tmp, "a") as f:
            f.attrs[KIND_ATTRIBUTE] = WEIGHTS_KIND
            write_boundary_state(f, boundary_state, n_starts)
    return out_path


def read_scalar_mix(weight_file):
    """The scalar mix a weight file starts ELMo's layer weighting from, or None when it has none.

    Returns:
        `(W (n_layers + 1,), gamma (1,))` float32, as `WeightLayers` holds
        them: ELMo is `gamma * sum_j softmax(W)_j h_j`.
    """
    with open_for_reading(weight_file, "Weight file") as f:
        group = f.get(SCALAR_MIX_GROUP)
        if not isinstance(group, h5py.Group):
            return None
        return group["W"][...].astype(np.float32), group["gamma"][...].astype(np.float32).reshape(1)


def read_boundary_state(weight_file):
    """The boundary state stored in a weight file, or None when it has none.

    Returns:
        `({state key: float32 (size,)}, number of starts averaged)` or None.

    Raises:
        WeightFileError: the file is missing or is not a readable HDF5 file.
    """
    with open_for_reading(weight_file, "Weight file") as f:
        group = f.get(BOUNDARY_STATE_GROUP)
        if not isinstance(group, h5py.Group):
            return None
        return {key: group[key][...].astype(np.float32) for key in group}, int(group.attrs.get("n_starts", 0))


def write_boundary_state(h5_file, state, n_starts):
    """Adds (or replaces) the boundary state datasets in an open HDF5 file."""
    if BOUNDARY_STATE_GROUP in h5_file:
        del h5_file[BOUNDARY_STATE_GROUP]
    group = h5_file.create_group(BOUNDARY_STATE_GROUP)
    group.attrs["n_starts"] = int(n_starts)
    for key, value in state.items():
        group.create_dataset(key, data=np.asarray(value, np.float32))


@contextlib.contextmanager
def token_embeddings_writer(path, n_vocab, dim):
    """Yields the `embedding` dataset `(n_vocab, dim)` float32 of a new token
    embedding file, to fill in parts; the file is written under a temporary
    name and renamed when the block completes."""
    with atomic_output(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs[KIND_ATTRIBUTE] = TOKEN_EMBEDDINGS_KIND
        yield f.create_dataset("embedding", (n_vocab, dim), dtype="float32")


def save_token_embeddings(path, embedding):
    """Writes `embedding` `(n_vocab, projection_dim)` as a token embedding file."""
    embedding = np.asarray(embedding, np.float32)
    with token_embeddings_writer(path, *embedding.shape) as dataset:
        dataset[...] = embedding
