"""The training keys of `options.json`, parsed once into `TrainingSettings`.

The keys, their kinds, defaults and meaning are `bilm.options.keys`' table
(docs/formats.md, "Options"); `n_tokens_vocab` and `n_train_tokens` (which
the corpus gives) are required, the others take their defaults.
"""
import dataclasses
import difflib
import json
import warnings
from typing import Optional, Union

from bilm.ops.kernel_dtypes import check_matmul_dtype
from bilm.optimizers import optimizer_class
from bilm.options import OptionsError, load_options
from bilm.options.keys import BOTH, REQUIRED, TRAINING, keys_in, option_key, sections

# The model keys training reads, by section.
MODEL_KEYS = {section: keys_in(section, (BOTH,)) for section in sections((BOTH,)) if section}


def check_known_keys(options):
    """Raises `OptionsError` for the first key of a training options file that
    bilm does not know (a typo would otherwise train on with a default),
    naming it and the closest known key. `options`: `BiLMOptions`."""
    raw = options.raw
    for section in sections((BOTH, TRAINING)):
        known = keys_in(section, (BOTH, TRAINING))
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


def check_jit_compile(value, source):
    """The training key `jit_compile`: `"auto"`, or JSON true or false; else `OptionsError`."""
    if value == "auto":
        return value
    if isinstance(value, bool):
        return value
    raise OptionsError(f"{source}: training key 'jit_compile' must be \"auto\", true or false, got "
                       f"{json.dumps(value)} (\"auto\" compiles the step on a GPU; see docs/performance.md).")


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """The training keys of `options.json`, validated (docs/formats.md, "Options").

    `batch_size` is per replica (per GPU), as in bilm-tf. The first
    `softmax_warmup_steps` steps of a run (counted from its step 0, so a
    restart keeps them) train the softmax alone, the biLM frozen.
    `jit_compile` is `"auto"`, True or False, as the options give it
    (`bilm.backend.tensorflow.training_ops.compiles_whole_step` decides "auto").
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
    jit_compile: Union[str, bool] = "auto"


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
    if cnn is not None and cnn.n_characters != cnn.training_n_characters:
        rows = cnn.training_n_characters
        raise OptionsError(
            f"{source}: 'char_cnn.n_characters' is {cnn.n_characters}, but training reads unshifted "
            f"character ids and needs {rows}. Set it to {rows} "
            f"({rows + 1} is the prediction layout that dump_weights writes).")

    def value(key, required=True):
        """The key's value checked as the table says (absent: its default); 0 for an absent optional count."""
        entry = option_key(key)
        given = options.raw[key] if key in options.raw else (None if entry.default == REQUIRED else entry.default)
        if given is None and not required:
            return 0
        return entry.check(given, source)

    sample_softmax = value("sample_softmax")
    share = value("share_embedding_softmax")
    if share and cnn is not None:
        raise OptionsError(
            f"{source}: 'share_embedding_softmax' ties the softmax to the token embedding, which only "
            "token inputs have; remove 'char_cnn' or set share_embedding_softmax to false.")
    try:
        matmul_dtype = check_matmul_dtype(options.get("matmul_dtype", option_key("matmul_dtype").default),
                                          where=f"{source}: training key 'matmul_dtype'")
    except ValueError as error:
        raise OptionsError(f"{error} \"bfloat16\" runs the largest matmuls with bfloat16 operands "
                           "(see bilm.ops.matmul_dtype); \"float32\" is the original arithmetic.") from None
    n_tokens_vocab = value("n_tokens_vocab")
    n_negative = value("n_negative_samples_batch", required=sample_softmax)
    if sample_softmax and n_negative > n_tokens_vocab:
        # Fewer words than negatives: the full softmax is exact and no dearer.
        warnings.warn(
            f"{source}: 'n_negative_samples_batch' ({n_negative}) exceeds the vocabulary ('n_tokens_vocab' "
            f"{n_tokens_vocab}), so training uses the full softmax over all {n_tokens_vocab} words instead of "
            "sampling negatives (set n_negative_samples_batch below the vocabulary size to sample).",
            stacklevel=2)
        sample_softmax = False
    optimizer = options.get("optimizer", option_key("optimizer").default)
    default_learning_rate = optimizer_class(optimizer, source).default_learning_rate
    learning_rate = value("learning_rate") if "learning_rate" in options.raw else default_learning_rate
    settings = TrainingSettings(
        n_tokens_vocab=n_tokens_vocab,
        batch_size=value("batch_size"),
        unroll_steps=value("unroll_steps"),
        bidirectional=value("bidirectional"),
        dropout=value("dropout"),
        sample_softmax=sample_softmax,
        n_negative_samples_batch=n_negative,
        share_embedding_softmax=share,
        learning_rate=learning_rate,
        all_clip_norm_val=value("all_clip_norm_val"),
        n_epochs=value("n_epochs"),
        n_train_tokens=value("n_train_tokens", required=need_schedule),
        matmul_dtype=matmul_dtype,
        softmax_warmup_steps=value("softmax_warmup_steps"),
        optimizer=optimizer,
        max_steps=value("max_steps"),
        jit_compile=check_jit_compile(options.get("jit_compile", option_key("jit_compile").default), source),
    )
    return options, settings

