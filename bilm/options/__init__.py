"""`options.json`: every key in one table (`bilm.options.keys`), parsed once at the edge into typed options.

The model's sections become `BiLMOptions` (`bilm.options.model_options`);
the training keys are read by `bilm.training.config`. Both take the keys,
their defaults and their checks from `OPTION_KEYS`.
"""
from bilm.options.keys import OPTION_KEYS, OptionKey
from bilm.options.model_options import (
    ACTIVATIONS,
    PREDICTION_N_CHARACTERS,
    TRAINING_N_CHARACTERS,
    BiLMOptions,
    CharCNNOptions,
    OptionsError,
    WordEmbeddingOptions,
    boolean,
    holds_options,
    load_options,
    options_json,
    read_options_json,
    save_options,
)

__all__ = [
    "ACTIVATIONS",
    "OPTION_KEYS",
    "PREDICTION_N_CHARACTERS",
    "TRAINING_N_CHARACTERS",
    "BiLMOptions",
    "CharCNNOptions",
    "OptionKey",
    "OptionsError",
    "WordEmbeddingOptions",
    "boolean",
    "holds_options",
    "load_options",
    "options_json",
    "read_options_json",
    "save_options",
]
