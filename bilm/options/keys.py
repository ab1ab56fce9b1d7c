"""Every key of `options.json`, in one table: where it sits, its kind, its default, who reads it.

The model's sections are read by prediction and training alike
(`bilm.options.model_options`); the top-level training keys by training
alone (`bilm.training.config`). Parsing, the
presets' training defaults, the strict-key check of training options,
adaptation's comparison of architectures and the flags of
`bin/train_elmo.py` all read this table; docs/formats.md lists it.
"""
import dataclasses
import json
import math
from typing import Tuple

from bilm.errors import UserError

# `OptionKey.default` of a key that must be given (or that the corpus gives).
REQUIRED = "required"
# `OptionKey.default` of `learning_rate`: the chosen optimizer's own (`bilm.optimizers`).
OPTIMIZER_DEFAULT = "the optimizer's"

# `OptionKey.used_by`.
BOTH = "prediction and training"
TRAINING = "training"
PREDICTION = "prediction"


class OptionsError(UserError):
    """An options file or dict is missing a key or has a bad value."""


def boolean(value, source, key):
    """`value` of the options key `key` as a bool: JSON true or false (0 and 1 are taken too); else OptionsError."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise OptionsError(f"{source}: '{key}' must be true or false, got {json.dumps(value)}.")


@dataclasses.dataclass(frozen=True)
class OptionKey:
    """One key of `options.json`.

    Attributes:
        path: the key, with its sections: `"lstm.dim"`, `"dropout"`.
        kind: `"integer"` (at least `low`), `"number"` (in `[low, high)`),
            `"boolean"` (JSON true/false), `"section"` (an object of keys),
            or the name of a value with a check of its own (`"activation"`,
            `"filters"`, `"matmul_dtype"`, `"optimizer"`, `"jit_compile"`, ...).
        default: the value an absent key means; `REQUIRED` if it must be
            given; None for "absent means none".
        used_by: `BOTH`, `TRAINING` or `PREDICTION`.
        meaning: one line for people (the docs' table, the flag's help).
        flag: `bin/train_elmo.py` and `bin/restart.py` have `--<key>`.
        from_corpus: training fills it from the corpus when absent.
    """

    path: str
    kind: str
    default: object
    used_by: str
    meaning: str
    low: float = 1
    high: float = math.inf
    flag: bool = False
    from_corpus: bool = False

    @property
    def section(self):
        """`"lstm"`, `"char_cnn.embedding"`, or `""` for a top-level key."""
        return self.path.rpartition(".")[0]

    @property
    def name(self):
        return self.path.rpartition(".")[2]

    def check(self, value, source):
        """`value` of this key, checked and typed (int, float or bool); else `OptionsError`.

        Only for the kinds `"integer"`, `"number"` and `"boolean"`; a `None`
        value of a key whose default is None means "none" and is returned.
        """
        if value is None and self.default is None:
            return None
        where = f"training key '{self.path}'" if self.used_by == TRAINING else f"'{self.path}'"
        if self.kind == "boolean":
            return boolean(value, source, self.path)
        if self.kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int) or value < self.low:
                raise OptionsError(f"{source}: {where} must be an integer >= {self.low}, got {value!r}.")
            return value
        if self.kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low <= value < self.high:
                raise OptionsError(f"{source}: {where} must be a number in [{self.low}, {self.high}), got "
                                   f"{value!r}.")
            return float(value)
        raise ValueError(f"{self.path} ({self.kind}) has a check of its own.")


def _key(path, kind, default, used_by, meaning, **extra):
    return OptionKey(path, kind, default, used_by, meaning, **extra)


OPTION_KEYS: Tuple[OptionKey, ...] = (
    # The model: its LSTMs.
    _key("lstm", "section", REQUIRED, BOTH, "the biLM's LSTMs"),
    _key("lstm.dim", "integer", REQUIRED, BOTH, "the LSTM cell size"),
    _key("lstm.projection_dim", "integer", REQUIRED, BOTH,
         "P: each layer's output and the token encoding (every output vector has 2P numbers)"),
    _key("lstm.n_layers", "integer", REQUIRED, BOTH, "LSTM layers per direction"),
    _key("lstm.cell_clip", "positive_or_absent", None, BOTH, "bound of the cell state (absent: none)"),
    _key("lstm.proj_clip", "positive_or_absent", None, BOTH, "bound of the projected output (absent: none)"),
    _key("lstm.use_skip_connections", "boolean", False, BOTH, "add each layer's input to its output above the first"),
    # The model: its token encoder (absent: the model reads token ids).
    _key("char_cnn", "section", None, BOTH, "the character CNN token encoder (absent: the model reads token ids)"),
    _key("char_cnn.activation", "activation", REQUIRED, BOTH, "the convolutions' activation: relu or tanh"),
    _key("char_cnn.embedding", "section", REQUIRED, BOTH, "the character embedding"),
    _key("char_cnn.embedding.dim", "integer", REQUIRED, BOTH, "numbers per character"),
    _key("char_cnn.filters", "filters", REQUIRED, BOTH, "one convolution per [width, filters] pair"),
    _key("char_cnn.max_characters_per_token", "integer", REQUIRED, BOTH,
         "characters per token, the begin and end of word marks included", low=3),
    _key("char_cnn.n_characters", "n_characters", REQUIRED, BOTH,
         "rows of the character table: 261 for training, 262 for prediction (with characters: its ids, or one more)"),
    _key("char_cnn.n_highway", "integer", 0, BOTH, "highway layers after the convolutions", low=0),
    # Models that read text through dictionaries of their own (ELMoForManyLangs').
    _key("char_cnn.characters", "character_dictionary", None, BOTH,
         "the model's own character dictionary instead of UTF-8 byte ids"),
    _key("word_embedding", "section", None, BOTH, "a word vector per token, before the char CNN's features"),
    _key("word_embedding.dim", "integer", REQUIRED, BOTH, "numbers per word"),
    _key("word_embedding.ids", "id_map", REQUIRED, BOTH, "the words' ids"),
    _key("word_embedding.unknown", "integer", REQUIRED, BOTH, "the id of a word not listed", low=0),
    # Training: what the corpus gives.
    _key("n_tokens_vocab", "integer", REQUIRED, TRAINING, "words of the vocabulary (default: the vocabulary file's)",
         from_corpus=True),
    _key("n_train_tokens", "integer", REQUIRED, TRAINING, "tokens per epoch (default: counted from the shards)",
         from_corpus=True, flag=True),
    # Training: the original recipe's keys.
    _key("batch_size", "integer", 128, TRAINING, "rows per batch and per GPU", flag=True),
    _key("unroll_steps", "integer", 20, TRAINING, "time steps per window (truncated backpropagation)", flag=True),
    _key("n_epochs", "integer", 10, TRAINING, "epochs over the training data", flag=True),
    _key("n_negative_samples_batch", "integer", 8192, TRAINING,
         "negative words sampled per batch for the softmax (a vocabulary smaller than this trains with the full "
         "softmax)", flag=True),
    _key("bidirectional", "boolean", True, TRAINING, "train the backward LM too"),
    _key("dropout", "number", 0.1, TRAINING, "dropout rate on the LSTM inputs and outputs", low=0.0, high=1.0,
         flag=True),
    _key("all_clip_norm_val", "number", 10.0, TRAINING, "clip the gradients to this global norm", low=1e-12),
    _key("learning_rate", "number", OPTIMIZER_DEFAULT, TRAINING, "the optimizer's learning rate", low=1e-12,
         flag=True),
    _key("sample_softmax", "boolean", True, TRAINING, "a sampled softmax (else the full softmax)"),
    _key("share_embedding_softmax", "boolean", False, TRAINING,
         "tie the softmax to the token embedding (token-input models only)"),
    # Training: bilm's own keys.
    _key("matmul_dtype", "matmul_dtype", "float32", TRAINING,
         "bfloat16: the highway, LSTM input-half and softmax matmuls take bfloat16 operands", flag=True),
    _key("softmax_warmup_steps", "integer", 0, TRAINING,
         "first steps of the run that train the softmax alone, the biLM frozen (for a new softmax over a model "
         "adapted with --init_from)", low=0, flag=True),
    _key("optimizer", "optimizer", "adagrad", TRAINING, "the optimizer (bilm.optimizers)", flag=True),
    _key("jit_compile", "jit_compile", "auto", TRAINING,
         "compile each training step whole with XLA: true, false, or auto (compiled on a GPU, not on a CPU, where "
         "it measured slower: docs/performance.md)", flag=True),
    _key("max_steps", "integer", None, TRAINING,
         "end the run after this many optimizer steps in all, counted from its start (or at --n_epochs, whichever "
         "comes first)", flag=True),
)

_BY_PATH = {key.path: key for key in OPTION_KEYS}


def option_key(path):
    """The `OptionKey` of `path` (`"lstm.dim"`); KeyError for a key the table does not have."""
    return _BY_PATH[path]


def keys_in(section, used_by=(BOTH, TRAINING, PREDICTION)):
    """The names of the keys directly in `section` (`""` for the top level) read by any of `used_by`."""
    return tuple(key.name for key in OPTION_KEYS if key.section == section and key.used_by in used_by)


def sections(used_by=(BOTH, TRAINING, PREDICTION)):
    """Every section (`""`, `"lstm"`, ...) holding keys read by any of `used_by`."""
    return tuple(dict.fromkeys(key.section for key in OPTION_KEYS if key.used_by in used_by))


def absent_means(path):
    """What `path` means when the options leave it out (None for a required key)."""
    default = _BY_PATH[path].default
    return None if default == REQUIRED else default


def training_keys():
    """The top-level keys training reads (`OptionKey`s), in the table's order."""
    return tuple(key for key in OPTION_KEYS if key.used_by == TRAINING)


def default_text(key):
    """The default of `key` as the docs and `--help` say it."""
    if key.default is None:
        return "none"
    if isinstance(key.default, str):
        return key.default
    return json.dumps(key.default)

