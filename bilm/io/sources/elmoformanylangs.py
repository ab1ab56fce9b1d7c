"""ELMoForManyLangs' model folders (HIT-SCIR's models of 44 languages) in bilm's options and weights.

A folder (docs/formats.md, "ELMoForManyLangs models") holds `config.json`,
whose `config_path` names the architecture file (often a path on the
authors' machine: as the original code does, bilm looks for it in the
folder, then under its base name in the folder, then among the two
standard architectures it knows), the dictionaries `char.dic` and
`word.dic`, and two PyTorch state dicts, `token_embedder.pkl` and
`encoder.pkl` (read by `bilm.io.formats.torch_pickle`, without PyTorch).

`read_elmoformanylangs(directory)` checks all of it against the
architecture before converting anything, then returns bilm's options (a
dict: the architecture, and the dictionaries as `char_cnn.characters` and
`word_embedding`, see `bilm.text.dictionary_ids`) and the weights under the
names of bilm's HDF5 layout. The conventions of that code are converted
here, once, by the named hooks below: PyTorch's `(out, in)` kernels
transposed, the highway gate that keeps the input turned into bilm's carry
gate, the LSTM gates reordered from `i, f, g, o` to `i, j, f, o` and its
forget bias (no offset at run time) moved into the bias, and the swapped
begin/end-of-word ids that its batching really uses.
"""
import json
import os

import numpy as np

from bilm.io.formats.torch_pickle import read_torch_state_dict
from bilm.io.sources.model_cache import ModelFileError, read_json_object

CONFIG_FILE = "config.json"
CHAR_DICTIONARY = "char.dic"
WORD_DICTIONARY = "word.dic"
TOKEN_EMBEDDER_FILE = "token_embedder.pkl"
ENCODER_FILE = "encoder.pkl"
# The files that mark such a folder.
MARKERS = (CHAR_DICTIONARY, WORD_DICTIONARY, ENCODER_FILE, TOKEN_EMBEDDER_FILE)
# The architecture of every published model, which the original package
# ships under both names (the files are identical).
STANDARD_ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {"name": "cnn", "activation": "relu",
                       "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                       "n_highway": 2, "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50},
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
STANDARD_ARCHITECTURES = {"cnn_0_100_512_4096_sample.json": STANDARD_ARCHITECTURE,
                          "cnn_50_100_512_4096_sample.json": STANDARD_ARCHITECTURE}
CHAR_SPECIALS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")
WORD_SPECIALS = ("<oov>", "<pad>")
# The ideographic space, which an entry of one field stands for (the line's
# entry was whitespace, stripped away with the line's ends).
ONE_FIELD_ENTRY = "\u3000"
DIRECTIONS = ("forward", "backward")


class ELMoForManyLangsError(ModelFileError):
    """An ELMoForManyLangs folder that bilm cannot read: a missing or bad file, or an unsupported variant."""


def read_elmoformanylangs(directory):
    """The model in an ELMoForManyLangs folder, in bilm's layout.

    Returns:
        `(options, arrays)`: the options dict (see the module docstring)
        and `{HDF5 dataset name: float32 array}` (`bilm.io.formats.weight_file`'s
        names, plus `word_embed` for the word embedding).

    Raises:
        ELMoForManyLangsError: a missing file, an unreadable or
            contradicting one (naming it), or a variant bilm does not run
            (an LSTM token embedder or encoder, a model without characters).
        TorchFileError: a weight file that is not a state dict of tensors.
    """
    directory = os.fspath(directory)
    architecture_file, architecture = _architecture(directory)
    dims = _dimensions(architecture, architecture_file)
    chars = read_dictionary(_required(directory, CHAR_DICTIONARY), CHAR_SPECIALS)
    words = read_dictionary(_required(directory, WORD_DICTIONARY), WORD_SPECIALS) if dims["word_dim"] else None
    token_file, encoder_file = _required(directory, TOKEN_EMBEDDER_FILE), _required(directory, ENCODER_FILE)
    token_embedder = read_torch_state_dict(token_file)
    encoder = read_torch_state_dict(encoder_file)
    _check_shapes(token_file, token_embedder, _token_embedder_shapes(dims, len(chars), words and len(words)))
    _check_shapes(encoder_file, encoder, _encoder_shapes(dims))
    for dictionary, name in ((chars, CHAR_DICTIONARY), (words, WORD_DICTIONARY)):
        if dictionary is not None and max(dictionary.values()) + 1 != len(dictionary):
            raise ELMoForManyLangsError(
                f"{os.path.join(directory, name)}: its {len(dictionary)} entries have ids up to "
                f"{max(dictionary.values())}; the ids must number the rows of the embedding in {TOKEN_EMBEDDER_FILE} "
                f"(0 to {len(dictionary) - 1}).")
    arrays = {**_token_embedder_arrays(token_embedder, dims), **_encoder_arrays(encoder, dims)}
    return _options(dims, chars, words), arrays


def _required(directory, name):
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise ELMoForManyLangsError(f"{directory} holds an ELMoForManyLangs model without its {name} (found "
                                    f"{', '.join(sorted(os.listdir(directory)))}); the download may be incomplete.")
    return path


def _architecture(directory):
    """`(where it was found, the architecture dict)` named by `config.json`'s `config_path`."""
    config_file = _required(directory, CONFIG_FILE)
    config_path = read_json_object(config_file).get("config_path")
    if not isinstance(config_path, str) or not config_path:
        raise ELMoForManyLangsError(f"{config_file} has no 'config_path' (the architecture file's path).")
    name = os.path.basename(config_path.replace("\\", "/"))
    for candidate in (os.path.join(directory, config_path), os.path.join(directory, name)):
        if os.path.isfile(candidate):
            return candidate, read_json_object(candidate)
    if name in STANDARD_ARCHITECTURES:
        return f"{name} (the standard architecture)", json.loads(json.dumps(STANDARD_ARCHITECTURES[name]))
    raise ELMoForManyLangsError(
        f"{config_file} names the architecture file {config_path!r}, which is neither in {directory} nor one of the "
        f"standard ones ({', '.join(STANDARD_ARCHITECTURES)}); copy it into the folder.")


def _dimensions(architecture, source):
    """The sizes of the architecture, checked; ELMoForManyLangsError for a variant bilm does not run."""
    embedder, encoder = architecture.get("token_embedder"), architecture.get("encoder")
    if not isinstance(embedder, dict) or not isinstance(encoder, dict):
        raise ELMoForManyLangsError(f"{source} needs 'token_embedder' and 'encoder' sections.")
    for section, name, supported in (("token_embedder", embedder.get("name"), "cnn"),
                                     ("encoder", encoder.get("name"), "elmo")):
        if str(name).lower() != supported:
            raise ELMoForManyLangsError(
                f"{source}: its {section} is {name!r}; bilm runs ELMoForManyLangs' '{supported}' {section} (that of "
                "every published model), not its 'lstm' variant.")
    dims = {key: _number(section, key, source, minimum) for section, key, minimum in (
        (embedder, "char_dim", 0), (embedder, "max_characters_per_token", 3), (embedder, "n_highway", 0),
        (embedder, "word_dim", 0), (encoder, "projection_dim", 1), (encoder, "dim", 1), (encoder, "n_layers", 1))}
    dims.update(cell_clip=_clip(encoder, "cell_clip", source), proj_clip=_clip(encoder, "proj_clip", source),
                activation=embedder.get("activation"), filters=embedder.get("filters"))
    if dims["char_dim"] == 0:
        raise ELMoForManyLangsError(f"{source}: char_dim is 0, a model of words only; bilm runs character models.")
    if dims["activation"] not in ("relu", "tanh"):
        raise ELMoForManyLangsError(f"{source}: activation must be 'relu' or 'tanh', got {dims['activation']!r}.")
    filters = dims["filters"]
    if not (isinstance(filters, list) and filters and all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(v, int) and 0 < v for v in f) for f in filters)
            and max(w for w, _ in filters) <= dims["max_characters_per_token"]):
        raise ELMoForManyLangsError(f"{source}: filters must be [width, number] pairs of widths up to "
                                    f"max_characters_per_token; got {filters!r}.")
    dims["n_filters"] = sum(n for _, n in filters)
    if dims["projection_dim"] >= dims["dim"] or dims["word_dim"] + dims["n_filters"] == dims["projection_dim"]:
        raise ELMoForManyLangsError(
            f"{source}: projection_dim {dims['projection_dim']} equals the LSTM's dim or the token features' "
            "width; bilm runs models whose projections change the width (those of every published model).")
    return dims


def _number(section, key, source, minimum):
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ELMoForManyLangsError(f"{source}: '{key}' must be an integer >= {minimum}, got {value!r}.")
    return value


def _clip(section, key, source):
    """A clip value, None for none (the original clips only when the value is truthy)."""
    value = section.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
        raise ELMoForManyLangsError(f"{source}: '{key}' must be a number >= 0 or null, got {value!r}.")
    return float(value) if value else None


def read_dictionary(path, specials):
    """`{entry: id}` of a `char.dic` / `word.dic`, read as the original reads it.

    Every line (split at any Unicode line boundary) is stripped of
    whitespace at both ends and split at tabs; a line left with one field
    is the entry U+3000 (the ideographic space, stripped away) with that
    id. A later line of the same entry wins.

    Raises:
        ELMoForManyLangsError: a line that is not `entry<TAB>id`, or one of
            `specials` missing.
    """
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as error:
        raise ELMoForManyLangsError(f"{path} is not UTF-8 text ({error}).") from None
    ids = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, ONE_FIELD_ENTRY)
        if len(fields) != 2 or not fields[1].isdigit():
            raise ELMoForManyLangsError(f"{path}, line {number}: expected 'entry<TAB>id', got {line!r}.")
        ids[fields[0]] = int(fields[1])
    missing = [entry for entry in specials if entry not in ids]
    if missing:
        raise ELMoForManyLangsError(f"{path} lacks the entries {', '.join(missing)}, which the model's ids need.")
    return ids


# === The layouts of the two state dicts ===

def _token_embedder_shapes(dims, n_chars, n_words):
    filters, n_filters = dims["filters"], dims["n_filters"]
    shapes = {"word_emb_layer.embedding.weight": (n_words, dims["word_dim"])} if n_words else {}
    shapes["char_emb_layer.embedding.weight"] = (n_chars, dims["char_dim"])
    for i, (width, num) in enumerate(filters):
        shapes.update({f"convolutions.{i}.weight": (num, dims["char_dim"], width), f"convolutions.{i}.bias": (num,)})
    for k in range(dims["n_highway"]):
        shapes.update({f"highways._layers.{k}.weight": (2 * n_filters, n_filters),
                       f"highways._layers.{k}.bias": (2 * n_filters,)})
    shapes.update({"projection.weight": (dims["projection_dim"], dims["word_dim"] + n_filters),
                   "projection.bias": (dims["projection_dim"],)})
    return shapes


def _encoder_shapes(dims):
    p, gates = dims["projection_dim"], 4 * dims["dim"]
    shapes = {}
    for direction in DIRECTIONS:
        for layer in range(dims["n_layers"]):
            prefix = f"{direction}_layer_{layer}"
            shapes.update({f"{prefix}.input_linearity.weight": (gates, p),
                           f"{prefix}.state_linearity.weight": (gates, p), f"{prefix}.state_linearity.bias": (gates,),
                           f"{prefix}.state_projection.weight": (p, dims["dim"])})
    return shapes


def _check_shapes(path, arrays, expected):
    problems = [f"missing '{name}' {shape}" for name, shape in expected.items() if name not in arrays]
    problems += [f"'{name}' has shape {arrays[name].shape}, expected {shape}" for name, shape in expected.items()
                 if name in arrays and arrays[name].shape != shape]
    problems += [f"unexpected '{name}'" for name in arrays if name not in expected]
    problems += [f"'{name}' holds {array.dtype}, not floats" for name, array in arrays.items()
                 if name in expected and not np.issubdtype(array.dtype, np.floating)]
    if problems:
        shown = problems[:8] + ([f"and {len(problems) - 8} more"] if len(problems) > 8 else [])
        raise ELMoForManyLangsError(f"{path} does not match the architecture and the dictionaries beside it: "
                                    + "; ".join(shown) + ".")


# === Hooks: their arrays -> bilm's ===

def _conv_kernel(weight):
    """PyTorch's Conv1d `(num, char_dim, width)` -> TF1's conv2d `(1, width, char_dim, num)`."""
    return weight.transpose(2, 1, 0)[np.newaxis]


def _highway(weight, bias, n_filters):
    """`{name: array}` of one highway layer. Theirs computes `y = g * x + (1 - g) * relu(A x)` with
    `g = sigmoid(B x)`, A and B the two halves of one Linear; bilm's carry gate multiplies the transform
    instead, so it is `1 - g = sigmoid(-B x)`: B's half enters negated."""
    return {"W_transform": weight[:n_filters].T, "b_transform": bias[:n_filters],
            "W_carry": -weight[n_filters:].T, "b_carry": -bias[n_filters:]}


def _lstm_gates(array):
    """Gate blocks on the last axis from theirs `i, f, g, o` to bilm's `i, j, f, o` (`j`: the new value)."""
    i, f, g, o = np.split(array, 4, axis=-1)
    return np.concatenate([i, g, f, o], axis=-1)


def _lstm(arrays, prefix):
    """`{name: array}` of one LSTM layer: `W_0` is the input kernel over the recurrent one; their only
    bias is the state half's, and bilm adds 1.0 to the forget gate at run time, which theirs does not."""
    bias = _lstm_gates(arrays[f"{prefix}.state_linearity.bias"])
    units = bias.shape[0] // 4
    bias[2 * units:3 * units] -= 1.0
    return {"W_0": np.concatenate([_lstm_gates(arrays[f"{prefix}.input_linearity.weight"].T),
                                   _lstm_gates(arrays[f"{prefix}.state_linearity.weight"].T)]),
            "B": bias, "W_P_0": arrays[f"{prefix}.state_projection.weight"].T}


def _token_embedder_arrays(arrays, dims):
    out = {"char_embed": arrays["char_emb_layer.embedding.weight"]}
    if dims["word_dim"]:
        out["word_embed"] = arrays["word_emb_layer.embedding.weight"]
    for i in range(len(dims["filters"])):
        out[f"CNN/W_cnn_{i}"] = _conv_kernel(arrays[f"convolutions.{i}.weight"])
        out[f"CNN/b_cnn_{i}"] = arrays[f"convolutions.{i}.bias"]
    for k in range(dims["n_highway"]):
        layer = _highway(arrays[f"highways._layers.{k}.weight"], arrays[f"highways._layers.{k}.bias"],
                         dims["n_filters"])
        out.update({f"CNN_high_{k}/{name}": array for name, array in layer.items()})
    out["CNN_proj/W_proj"], out["CNN_proj/b_proj"] = arrays["projection.weight"].T, arrays["projection.bias"]
    return {name: np.ascontiguousarray(array, np.float32) for name, array in out.items()}


def _encoder_arrays(arrays, dims):
    arrays = {name: array.astype(np.float32) for name, array in arrays.items()}
    out = {}
    for d, direction in enumerate(DIRECTIONS):
        for layer in range(dims["n_layers"]):
            converted = _lstm(arrays, f"{direction}_layer_{layer}")
            out.update({f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/{name}": np.ascontiguousarray(array)
                        for name, array in converted.items()})
    return out


def _options(dims, chars, words):
    """bilm's options of the model (docs/formats.md, "Options")."""
    lstm = {"dim": dims["dim"], "projection_dim": dims["projection_dim"], "n_layers": dims["n_layers"],
            "use_skip_connections": True}
    lstm.update({key: dims[key] for key in ("cell_clip", "proj_clip") if dims[key] is not None})
    characters = {
        "ids": chars,
        # Their batching puts the id of '<eow>' first and that of '<bow>' last (create_one_batch reads the
        # two names into each other's variables); the model was trained so.
        "begin_of_word": chars["<eow>"], "end_of_word": chars["<bow>"],
        "padding": chars["<pad>"], "unknown": chars["<oov>"],
        "sentence_start": chars["<bos>"], "sentence_end": chars["<eos>"], "boundary_tokens": ["<bos>", "<eos>"]}
    options = {"lstm": lstm,
               "char_cnn": {"activation": dims["activation"], "embedding": {"dim": dims["char_dim"]},
                            "filters": dims["filters"], "max_characters_per_token": dims["max_characters_per_token"],
                            "n_characters": len(chars) + 1, "n_highway": dims["n_highway"], "characters": characters}}
    if words is not None:
        options["word_embedding"] = {"dim": dims["word_dim"], "ids": words, "unknown": words["<oov>"]}
    return options
