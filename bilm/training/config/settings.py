"""The training keys of `options.json`, parsed once into `TrainingSettings`.

The keys and their meaning are bilm-tf's (docs/formats.md, "Options");
every key of `bilm.presets.TRAINING_DEFAULTS`, the one table of training
defaults, may be left out; `n_tokens_vocab` and `n_train_tokens` (which
the corpus gives) are required.
"""
import dataclasses
import difflib
import math
import warnings
from typing import Optional

from bilm.ops.matmul_dtype import check_matmul_dtype
from bilm.optimizers import optimizer_class
from bilm.options import TRAINING_N_CHARACTERS, OptionsError, boolean, load_options
from bilm.presets import TRAINING_DEFAULTS

# Every key a training options file may hold: the model's sections and
# their keys, the training keys with defaults, and what the corpus gives.
MODEL_KEYS = {
    "lstm": ("dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections"),
    "char_cnn": ("activation", "embedding", "filters", "max_characters_per_token", "n_characters", "n_highway"),
    "char_cnn.embedding": ("dim",),
}
CORPUS_KEYS = ("n_tokens_vocab", "n_train_tokens")


def check_known_keys(options):
    """Raises `OptionsError` for the first key of a training options file that
    bilm does not know (a typo would otherwise train on with a default),
    naming it and the closest known key. `options`: `BiLMOptions`."""
    sections = {"": ("lstm", "char_cnn", *TRAINING_DEFAULTS, *CORPUS_KEYS), **MODEL_KEYS}
    raw = options.raw
    for section, known in sections.items():
        values = raw
        for part in filter(None, section.split(".")):
            values = values.get(part) if isinstance(values, dict) else None
        if not isinstance(values, dict):
            continue
        for key in values:
            if key not in known:
                where = f"{section}.{key}" if section else key
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                hint = f" Did you mean '{close[0]}'?" if close else f" Known keys here: {', '.join(sorted(known))}."
                raise OptionsError(f"{options.source}: unknown training option '{where}'.{hint} (A key bilm does "
                                   "not know would be ignored, and training would run with its default.)")


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """The training keys of `options.json`, validated (docs/formats.md, "Options").

    `batch_size` is per replica (per GPU), as in bilm-tf. The first
    `softmax_warmup_steps` steps of a run (counted from its step 0, so a
    restart keeps them) train the softmax alone, the biLM frozen.
    """

    n_tokens_vocab: int
    batch_size: int
    unroll_steps: int
    bidirectional: bool
    dropout: float
    sample_softmax: bool
    n_negative_samples_batch: int
    share_embedding_softmax: bool
    learning_rate: float
    all_clip_norm_val: float
    n_epochs: int
    n_train_tokens: int
    matmul_dtype: str
    softmax_warmup_steps: int
    optimizer: str
    max_steps: Optional[int] = None


def training_settings(options, need_schedule=True):
    """Parses and checks the training keys of `options` (dict, path or `BiLMOptions`).

    Args:
        need_schedule: require `n_train_tokens` (training needs it to count
            epochs; evaluation does not).

    Returns:
        `(BiLMOptions, TrainingSettings)`.

    Raises:
        OptionsError naming the options source and the key (an unknown key
        names the closest known one).
    """
    options = load_options(options)
    check_known_keys(options)
    source = options.source
    cnn = options.char_cnn
    if cnn is not None and cnn.n_characters != TRAINING_N_CHARACTERS:
        raise OptionsError(
            f"{source}: 'char_cnn.n_characters' is {cnn.n_characters}, but training reads unshifted "
            f"character ids and needs {TRAINING_N_CHARACTERS}. Set it to {TRAINING_N_CHARACTERS} "
            "(262 is the prediction layout that dump_weights writes).")

    def integer(key, required=True, minimum=1):
        value = options.get(key, _default(key))
        if value is None and not required:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise OptionsError(f"{source}: training key '{key}' must be an integer >= {minimum}, got {value!r}.")
        return value

    def number(key, low, high):
        value = options.get(key, _default(key))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value < high:
            raise OptionsError(f"{source}: training key '{key}' must be a number in [{low}, {high}), got {value!r}.")
        return float(value)

    def flag(key):
        return boolean(options.get(key, _default(key)), source, key)

    sample_softmax = flag("sample_softmax")
    share = flag("share_embedding_softmax")
    if share and cnn is not None:
        raise OptionsError(
            f"{source}: 'share_embedding_softmax' ties the softmax to the token embedding, which only "
            "token inputs have; remove 'char_cnn' or set share_embedding_softmax to false.")
    try:
        matmul_dtype = check_matmul_dtype(options.get("matmul_dtype", _default("matmul_dtype")),
                                          where=f"{source}: training key 'matmul_dtype'")
    except ValueError as error:
        raise OptionsError(f"{error} \"bfloat16\" runs the largest matmuls with bfloat16 operands "
                           "(see bilm.ops.matmul_dtype); \"float32\" is the original arithmetic.") from None
    n_tokens_vocab = integer("n_tokens_vocab")
    n_negative = integer("n_negative_samples_batch", required=sample_softmax)
    if sample_softmax and n_negative > n_tokens_vocab:
        # Fewer words than negatives: the full softmax is exact and no dearer.
        warnings.warn(
            f"{source}: 'n_negative_samples_batch' ({n_negative}) exceeds the vocabulary ('n_tokens_vocab' "
            f"{n_tokens_vocab}), so training uses the full softmax over all {n_tokens_vocab} words instead of "
            "sampling negatives (set n_negative_samples_batch below the vocabulary size to sample).",
            stacklevel=2)
        sample_softmax = False
    optimizer = options.get("optimizer", _default("optimizer"))
    default_learning_rate = optimizer_class(optimizer, source).default_learning_rate
    learning_rate = (number("learning_rate", 1e-12, math.inf) if "learning_rate" in options.raw
                     else default_learning_rate)
    settings = TrainingSettings(
        n_tokens_vocab=n_tokens_vocab,
        batch_size=integer("batch_size"),
        unroll_steps=integer("unroll_steps"),
        bidirectional=flag("bidirectional"),
        dropout=number("dropout", 0.0, 1.0),
        sample_softmax=sample_softmax,
        n_negative_samples_batch=n_negative,
        share_embedding_softmax=share,
        learning_rate=learning_rate,
        all_clip_norm_val=number("all_clip_norm_val", 1e-12, math.inf),
        n_epochs=integer("n_epochs"),
        n_train_tokens=integer("n_train_tokens", required=need_schedule),
        matmul_dtype=matmul_dtype,
        softmax_warmup_steps=integer("softmax_warmup_steps", minimum=0),
        optimizer=optimizer,
        max_steps=integer("max_steps", required=False) or None,
    )
    return options, settings


def _default(key):
    return TRAINING_DEFAULTS.get(key)
