"""A training run that starts from a published model: its architecture and weights, your text and settings.

A published model is an options file and HDF5 weights (anything
`bilm.io.locate_model` opens: a directory, an options or weight file, a
zip, a URL, a published name). It holds neither a softmax nor optimizer
state. A run adapted from it takes:
- the architecture (`lstm`, `char_cnn`, and `word_embedding` for a model
  that reads words too) from the model's options, in the training form
  (`n_characters` 261, or its character dictionary's ids: the weight file's
  character rows are indexed by the unshifted ids that training reads;
  prediction's row of padding in front is not in the file); a model with
  dictionaries of its own (ELMoForManyLangs') keeps them, and the training
  text is read through them;
- the training keys (batch size, epochs, negatives, learning rate, dropout,
  ...) from the caller's options, `bilm.presets.TRAINING_DEFAULTS` for
  those left out, never from the model's file (the options of bilm-tf's and
  the NLPL repository's models carry the keys they were trained with);
- the char CNN, highway, projection and LSTM weights from the weight file;
- a new softmax over the caller's vocabulary (`bilm.training.model.softmax_init`),
  a new optimizer state, LSTM states from zeros, and no boundary state
  (the run measures it on the new text at its end, as every run does).
"""
import dataclasses
import json
import os

from bilm.errors import UserError
from bilm.io.formats.weight_file import open_for_reading, read_entries, weight_table
from bilm.io.sources.model_files import ModelFiles, locate_model
from bilm.options import BiLMOptions, OptionsError, load_options, read_options_json
from bilm.options.keys import absent_means
from bilm.training.config.settings import MODEL_KEYS

# The options sections that are the architecture, which the model decides.
ARCHITECTURE_SECTIONS = ("lstm", "char_cnn", "word_embedding")


class AdaptationError(UserError):
    """A model cannot be adapted: it does not open, it reads token ids (no `char_cnn`), or the
    training options contradict its architecture."""


@dataclasses.dataclass(frozen=True)
class ModelToAdapt:
    """A published model opened for a training run to start from.

    Attributes:
        files: its `ModelFiles` (options and weight file).
        architecture: the `lstm`, `char_cnn` (and `word_embedding`) sections
            of its options (a dict, training form: `n_characters` the
            unshifted ids' rows; keys bilm does not use left out).
        source: what was asked for (a path, URL or name), for messages.
    """

    files: ModelFiles
    architecture: dict
    source: str


def open_model_to_adapt(init_from, cache_dir=None):
    """Opens the model at `init_from` (see the module docstring) and checks it can be adapted.

    Args:
        init_from: a path, URL or published name (`bilm.io.locate_model`),
            or a `ModelToAdapt` (returned as it is).
        cache_dir: where downloads and extracted zips are kept.

    Returns:
        `ModelToAdapt`.

    Raises:
        AdaptationError: the model cannot be found, downloaded or read, its
            weight file is not readable HDF5, or it has no `char_cnn` (a
            token-input model's vocabulary is its own, so its input layer
            cannot serve another vocabulary).
    """
    if isinstance(init_from, ModelToAdapt):
        return init_from
    source = os.fspath(init_from) if isinstance(init_from, os.PathLike) else str(init_from)
    try:
        files = locate_model(init_from, cache_dir=cache_dir)
        options = load_options(files.options_file)
        with open_for_reading(files.weight_file):
            pass
    except (UserError, FileNotFoundError) as error:
        raise AdaptationError(f"Cannot open the model to adapt, {source}: {error}") from None
    if options.char_cnn is None:
        raise AdaptationError(
            f"{source} is a token-input model ({files.options_file} has no 'char_cnn' section): its input is a "
            "table of its own vocabulary's words, so it cannot read another text's vocabulary. Adapt a model "
            "with a character CNN (every published ELMo model has one).")
    return ModelToAdapt(files, _architecture(options), source)


def _architecture(options):
    """The architecture sections of `options` (`BiLMOptions`) with the keys training knows, in the training form
    (`n_characters`: the unshifted ids' rows, 261 for byte ids or the dictionary's)."""
    raw = options.to_dict()
    architecture = {}
    for section in ARCHITECTURE_SECTIONS:
        if raw.get(section) is None:
            continue
        known = MODEL_KEYS[section]
        architecture[section] = {key: value for key, value in raw[section].items() if key in known}
    embedding = architecture["char_cnn"].get("embedding", {})
    architecture["char_cnn"]["embedding"] = {key: value for key, value in embedding.items()
                                             if key in MODEL_KEYS["char_cnn.embedding"]}
    architecture["char_cnn"]["n_characters"] = options.char_cnn.training_n_characters
    return architecture


def adaptation_options(model, options=None):
    """The training options of a run adapted from `model`: its architecture and the caller's training keys.

    Args:
        model: `ModelToAdapt` (or what `open_model_to_adapt` opens).
        options: the caller's training options: a dict, an options file or
            `BiLMOptions`; None for `bilm.presets.TRAINING_DEFAULTS` only.
            Its `lstm` and `char_cnn` sections may be left out or repeat
            the model's (`n_characters` with or without prediction's padding row both fit); training keys
            it leaves out take `TRAINING_DEFAULTS` when the run starts.

    Returns:
        `BiLMOptions`, named after `options`' file when there is one.

    Raises:
        AdaptationError naming every key of `options` whose value differs
        from the model's; OptionsError for an options file that is not a
        JSON object.
    """
    model = open_model_to_adapt(model)
    raw, source = _raw_options(options)
    if source is None:
        source = f"the training options adapting {model.source}"
    contradictions = []
    for section in ARCHITECTURE_SECTIONS:
        given = raw.get(section)
        if given is None:
            continue
        if not isinstance(given, dict):
            raise OptionsError(f"{source}: '{section}' must be an object, got {given!r}.")
        if section not in model.architecture:
            contradictions.append(f"'{section}' is given here but the model has none")
            continue
        contradictions += _contradictions(section, given, model.architecture[section])
    if contradictions:
        raise AdaptationError(
            f"{source} contradicts the architecture of the model to adapt, {model.source} "
            f"({model.files.options_file}): " + "; ".join(contradictions) + ". The architecture is the "
            "model's: remove these keys (or the whole 'lstm' and 'char_cnn' sections) from the options.")
    merged = json.loads(json.dumps(raw))
    for section in ARCHITECTURE_SECTIONS:
        # Keys the model does not decide stay, so that a typo still gets its error.
        if section in model.architecture:
            merged[section] = {**merged.get(section, {}), **model.architecture[section]}
    return BiLMOptions.from_dict(merged, source=source)


def _raw_options(options):
    """`(dict, source or None)` of training options given as a dict, a file or `BiLMOptions`, unvalidated."""
    if options is None:
        return {}, None
    if isinstance(options, BiLMOptions):
        return options.to_dict(), options.source
    if isinstance(options, dict):
        return json.loads(json.dumps(options)), None
    path = os.fspath(options)
    raw = read_options_json(path)
    if not isinstance(raw, dict):
        raise OptionsError(f"{path}: options must be a JSON object, got {type(raw).__name__}.")
    return raw, path


def _contradictions(section, given, model_section):
    """`["lstm.dim is 64 here but 128 in the model", ...]` for the keys of `given` that differ."""
    found = []
    for key, value in given.items():
        where = f"{section}.{key}"
        if where == "char_cnn.n_characters" and value in (model_section[key], model_section[key] + 1):
            continue  # the same table, with or without prediction's padding row
        if where == "char_cnn.embedding" and isinstance(value, dict):
            found += _contradictions(where, value, model_section.get("embedding", {}))
            continue
        if key not in MODEL_KEYS.get(section, ()):
            continue  # not architecture: the training settings' check names it
        expected = model_section.get(key, absent_means(where))
        if _normalized(value) != _normalized(expected):
            found.append(f"'{where}' is {json.dumps(value)} here but {json.dumps(expected)} in the model")
    return found


def _normalized(value):
    """JSON values compared as the model reads them: lists and tuples alike, 3 == 3.0."""
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    return value


def load_model_weights(lm, model):
    """Assigns the model's weight file to the biLM of `lm` (its `network`: an `ArrayTrainStep`'s,
    of `adaptation_options`); returns the number of datasets read.

    Raises:
        WeightFileError listing each dataset missing from the file or shaped
        otherwise than the model's options say.
    """
    entries = weight_table(lm.network)
    arrays = read_entries(model.files.weight_file, entries)
    for entry in entries:
        entry.set(arrays[entry.name])
    return len(entries)
