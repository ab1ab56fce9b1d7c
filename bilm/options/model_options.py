"""The model's sections of `options.json`, parsed once at the edge into typed constructor arguments.

The file format is the original bilm-tf one (docs/formats.md, "Options"):
`{"lstm": {...}, "char_cnn": {...}, <training keys>...}`. Layers never see
the raw dict; they receive the fields of `BiLMOptions`.
"""
import dataclasses
import difflib
import json
import os
from typing import Optional, Tuple

from bilm.io.formats.output_files import atomic_output
from bilm.options.keys import OptionsError, absent_means, boolean
from bilm.text.dictionary_ids import CharacterDictionary, WordDictionary

ACTIVATIONS = ("relu", "tanh")
# Rows of the character table. Training reads the unshifted ids (0-260);
# prediction shifts them by +1 so that 0 is batch padding, and the model
# puts a zero row in front. The weight file holds the 261 rows either way.
TRAINING_N_CHARACTERS = 261
PREDICTION_N_CHARACTERS = 262


@dataclasses.dataclass(frozen=True)
class CharCNNOptions:
    """The character CNN token encoder's hyperparameters.

    `filters` is a tuple of `(width, num_filters)` pairs. `n_characters` is
    the rows of the character table: 261 for training (unshifted ids) or
    262 for prediction (ids shifted by +1 so that 0 is padding) with the
    original UTF-8 byte ids; with a model's own `characters` dictionary
    (`bilm.text.dictionary_ids`), its `n_ids` or one more.
    """

    activation: str
    embedding_dim: int
    filters: Tuple[Tuple[int, int], ...]
    max_characters_per_token: int
    n_characters: int
    n_highway: int
    characters: Optional[CharacterDictionary] = None

    @property
    def n_filters(self):
        """F: the width of the concatenated CNN features."""
        return sum(num for _, num in self.filters)

    @property
    def training_n_characters(self):
        """Rows of the character table for unshifted ids (training): 261, or the dictionary's `n_ids`."""
        return TRAINING_N_CHARACTERS if self.characters is None else self.characters.n_ids


@dataclasses.dataclass(frozen=True)
class WordEmbeddingOptions:
    """A word embedding of `dim` numbers per word of `dictionary`, read beside the char CNN: its
    vectors come before the CNN's features in the token encoder's projection (ELMoForManyLangs)."""

    dim: int
    dictionary: WordDictionary


@dataclasses.dataclass(frozen=True)
class BiLMOptions:
    """All of `options.json`, typed. `char_cnn` is None for token inputs;
    `word_embedding` is None unless the model reads words besides characters.

    `raw` keeps the dict as read (training keys included) so that writing
    the options back loses nothing.
    """

    lstm_dim: int
    projection_dim: int
    n_layers: int
    cell_clip: Optional[float]
    proj_clip: Optional[float]
    use_skip_connections: bool
    char_cnn: Optional[CharCNNOptions]
    raw: dict = dataclasses.field(compare=False, repr=False)
    word_embedding: Optional[WordEmbeddingOptions] = None
    source: str = dataclasses.field(default="<dict>", compare=False, repr=False)

    def get(self, key, default=None):
        """A top-level training key (`batch_size`, `dropout`...) or `default`."""
        return self.raw.get(key, default)

    @property
    def token_id_width(self):
        """Ids per token of a character model: `max_characters_per_token`, plus
        the word's id with a word embedding (`bilm.text.dictionary_ids`)."""
        return self.char_cnn.max_characters_per_token + (self.word_embedding is not None)

    def to_dict(self):
        """The options as a JSON-ready dict, in the original layout."""
        return json.loads(json.dumps(self.raw))

    def for_prediction(self, use_character_inputs=True):
        """These options as a prediction model needs them: `n_characters`
        262 (see `PREDICTION_N_CHARACTERS`), or without the char CNN for a
        token-input model (its token embedding file replaces it)."""
        if use_character_inputs:
            if self.char_cnn is None:
                raise OptionsError(
                    f"{self.source}: use_character_inputs=True needs a 'char_cnn' section in the options; "
                    "for a token-input model pass use_character_inputs=False and embedding_weight_file=.")
            return self._with_n_characters(self.char_cnn.training_n_characters + 1)
        raw = self.to_dict()
        raw.pop("char_cnn", None)
        # The token embedding file replaces the whole token encoder.
        raw.pop("word_embedding", None)
        return type(self).from_dict(raw, source=self.source)

    def for_training(self):
        """These options as training needs them: `n_characters` 261 (or the dictionary's `n_ids`)."""
        if self.char_cnn is None:
            return self
        return self._with_n_characters(self.char_cnn.training_n_characters)

    def _with_n_characters(self, n_characters):
        if self.char_cnn.n_characters == n_characters:
            return self
        raw = self.to_dict()
        raw["char_cnn"]["n_characters"] = n_characters
        return type(self).from_dict(raw, source=self.source)

    def updated(self, **keys):
        """A copy with these top-level (training) keys set; the model's keys
        and `source` are unchanged, so errors still name the file."""
        raw = self.to_dict()
        raw.update(keys)
        return dataclasses.replace(self, raw=raw)

    @classmethod
    def from_dict(cls, raw, source="<dict>"):
        """Validates `raw` (the parsed JSON) and returns `BiLMOptions`.

        Raises `OptionsError` naming `source` and the offending key.
        """
        if not isinstance(raw, dict):
            raise OptionsError(f"{source}: options must be a JSON object, got {type(raw).__name__}.")
        lstm = _section(raw, "lstm", source)
        lstm_dim = _int(lstm, "dim", source, "lstm")
        projection_dim = _int(lstm, "projection_dim", source, "lstm")
        if projection_dim > lstm_dim:
            raise OptionsError(
                f"{source}: lstm.projection_dim ({projection_dim}) must not exceed lstm.dim ({lstm_dim})."
            )
        char_cnn = None
        if "char_cnn" in raw and raw["char_cnn"] is not None:
            char_cnn = _char_cnn_options(_section(raw, "char_cnn", source), source)
        word_embedding = None
        if raw.get("word_embedding") is not None:
            if char_cnn is None:
                raise OptionsError(f"{source}: 'word_embedding' goes with a 'char_cnn' section (a model that reads "
                                   "words and characters); token-input models have none.")
            word_embedding = _word_embedding_options(_section(raw, "word_embedding", source), source)
        return cls(
            lstm_dim=lstm_dim,
            projection_dim=projection_dim,
            n_layers=_int(lstm, "n_layers", source, "lstm"),
            cell_clip=_optional_float(lstm, "cell_clip", source),
            proj_clip=_optional_float(lstm, "proj_clip", source),
            use_skip_connections=boolean(_given_or_default(lstm, "lstm.use_skip_connections"), source,
                                         "lstm.use_skip_connections"),
            char_cnn=char_cnn,
            raw=json.loads(json.dumps(raw)),
            source=source,
            word_embedding=word_embedding,
        )


def load_options(options_file):
    """Reads and validates an `options.json` file into `BiLMOptions`."""
    if isinstance(options_file, BiLMOptions):
        return options_file
    if isinstance(options_file, dict):
        return BiLMOptions.from_dict(options_file)
    path = os.fspath(options_file)
    return BiLMOptions.from_dict(read_options_json(path), source=path)


def read_options_json(path):
    """The JSON value of an options file, unvalidated; FileNotFoundError or
    OptionsError naming the file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Options file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OptionsError(f"{path} is not a valid JSON options file: {e}") from None


def options_json(options):
    """The text `save_options` writes for `options` (`BiLMOptions` or dict)."""
    raw = options.to_dict() if isinstance(options, BiLMOptions) else options
    return json.dumps(raw, indent=2, sort_keys=True) + "\n"


def holds_options(options):
    """A test of an existing file's bytes: whether they are a JSON object equal to `options`
    (for `check_output_file(..., content=)`: such a file can be replaced, nothing is lost)."""
    expected = json.loads(options_json(options))

    def test(existing):
        try:
            return json.loads(existing.decode("utf-8")) == expected
        except (UnicodeDecodeError, ValueError):
            return False

    return test


def save_options(options, path):
    """Writes options as JSON, atomically (temporary name, then rename)."""
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(options_json(options))


def _given_or_default(section, path):
    """The value of `path` in its `section` dict; absent or null, what its absence means."""
    value = section.get(path.rpartition(".")[2])
    return absent_means(path) if value is None else value


def _missing(section, key, source, full):
    """The OptionsError for a required key that is absent, naming a key of the section that looks like a typo of it."""
    close = difflib.get_close_matches(key, [k for k in section if isinstance(k, str)], n=1, cutoff=0.75)
    prefix = full[: -len(key)]
    hint = f" The file has '{prefix}{close[0]}': did you mean '{full}'?" if close else ""
    return OptionsError(f"{source}: missing key '{full}'.{hint}")


def _section(raw, key, source):
    if key not in raw:
        raise _missing(raw, key, source, key)
    value = raw[key]
    if not isinstance(value, dict):
        raise OptionsError(f"{source}: '{key}' must be an object, got {value!r}.")
    return value


def _int(section, key, source, prefix, minimum=1):
    full = f"{prefix}.{key}"
    if key not in section:
        raise _missing(section, key, source, full)
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OptionsError(f"{source}: '{full}' must be an integer >= {minimum}, got {value!r}.")
    return value


def _optional_float(section, key, source):
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise OptionsError(f"{source}: 'lstm.{key}' must be a positive number or absent, got {value!r}.")
    return float(value)


def _char_cnn_options(cnn, source):
    if "activation" not in cnn:
        raise _missing(cnn, "activation", source, "char_cnn.activation")
    activation = cnn["activation"]
    if activation not in ACTIVATIONS:
        raise OptionsError(
            f"{source}: 'char_cnn.activation' must be one of {ACTIVATIONS}, got {activation!r}."
        )
    if "embedding" not in cnn:
        raise _missing(cnn, "embedding", source, "char_cnn.embedding")
    embedding = cnn["embedding"]
    if not isinstance(embedding, dict):
        raise OptionsError(f"{source}: 'char_cnn.embedding' must be an object with 'dim', got {embedding!r}.")
    filters = cnn.get("filters")
    if not isinstance(filters, (list, tuple)) or not filters:
        raise OptionsError(f"{source}: 'char_cnn.filters' must be a non-empty list of [width, num], got {filters!r}.")
    parsed = []
    for i, pair in enumerate(filters):
        ok = isinstance(pair, (list, tuple)) and len(pair) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair
        )
        if not ok:
            raise OptionsError(
                f"{source}: 'char_cnn.filters[{i}]' must be [width, num] positive integers, got {pair!r}.")
        parsed.append((pair[0], pair[1]))
    max_chars = _int(cnn, "max_characters_per_token", source, "char_cnn", minimum=3)
    too_wide = [w for w, _ in parsed if w > max_chars]
    if too_wide:
        raise OptionsError(
            f"{source}: filter widths {too_wide} exceed 'char_cnn.max_characters_per_token' ({max_chars})."
        )
    characters = None
    if cnn.get("characters") is not None:
        characters = _character_dictionary(_section(cnn, "characters", source), source)
    n_ids = TRAINING_N_CHARACTERS if characters is None else characters.n_ids
    n_characters = _int(cnn, "n_characters", source, "char_cnn")
    if n_characters not in (n_ids, n_ids + 1):
        raise OptionsError(
            f"{source}: 'char_cnn.n_characters' must be {n_ids} (training) or {n_ids + 1} (prediction), got "
            f"{n_characters}.")
    n_highway = _given_or_default(cnn, "char_cnn.n_highway")
    if isinstance(n_highway, bool) or not isinstance(n_highway, int) or n_highway < 0:
        raise OptionsError(f"{source}: 'char_cnn.n_highway' must be a non-negative integer, got {n_highway!r}.")
    return CharCNNOptions(
        activation=activation,
        embedding_dim=_int(embedding, "dim", source, "char_cnn.embedding"),
        filters=tuple(parsed),
        max_characters_per_token=max_chars,
        n_characters=n_characters,
        n_highway=n_highway,
        characters=characters,
    )


_CHARACTER_ROLES = ("begin_of_word", "end_of_word", "padding", "unknown", "sentence_start", "sentence_end")


def _character_dictionary(section, source):
    """`char_cnn.characters`: a model's own character dictionary (`bilm.text.dictionary_ids`)."""
    ids = _id_map(section, "char_cnn.characters", source)
    roles = {role: _int(section, role, source, "char_cnn.characters", minimum=0) for role in _CHARACTER_ROLES}
    tokens = section.get("boundary_tokens")
    if not (isinstance(tokens, list) and len(tokens) == 2 and all(isinstance(t, str) and t for t in tokens)
            and tokens[0] != tokens[1]):
        raise OptionsError(f"{source}: 'char_cnn.characters.boundary_tokens' must be two different tokens "
                           f"[sentence start, sentence end], got {tokens!r}.")
    return CharacterDictionary(ids=ids, boundary_tokens=tuple(tokens), **roles)


def _word_embedding_options(section, source):
    """`word_embedding`: `dim` and the words' dictionary (`ids`, `unknown`)."""
    dictionary = WordDictionary(_id_map(section, "word_embedding", source),
                                _int(section, "unknown", source, "word_embedding", minimum=0))
    return WordEmbeddingOptions(_int(section, "dim", source, "word_embedding"), dictionary)


def _id_map(section, prefix, source):
    ids = section.get("ids")
    if not (isinstance(ids, dict) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                          for v in ids.values())):
        raise OptionsError(f"{source}: '{prefix}.ids' must be an object from strings to ids >= 0.")
    return ids
