"""The released biLM configurations, as `options.json` dicts (docs/formats.md, "Options").

Prediction options (`n_characters` 262). `training_options` turns one
into the training form with the original recipe's hyperparameters.
"""
import copy

from bilm.errors import UserError
from bilm.io.sources.published_models import PUBLISHED_MODELS
from bilm.optimizers import default_learning_rates, optimizer_class
from bilm.options import TRAINING_N_CHARACTERS
from bilm.options.keys import OPTIMIZER_DEFAULT, REQUIRED, option_key, training_keys

# The released sizes are the records of AllenNLP's published models (`bilm.io.sources.published_models`): `--size
# original` and `bilm.load("allennlp:original")` read the same architecture.
PRESETS = {
    **{size: PUBLISHED_MODELS[f"allennlp:{size}"].architecture for size in ("small", "medium", "original")},
    # A toy size for examples and quick checks (not a released model).
    "tiny": {
        "lstm": {"dim": 64, "projection_dim": 16, "n_layers": 2,
                 "cell_clip": 3, "proj_clip": 3, "use_skip_connections": True},
        "char_cnn": {"activation": "relu", "embedding": {"dim": 8},
                     "filters": [[1, 8], [2, 8], [3, 16], [4, 16]],
                     "max_characters_per_token": 50, "n_characters": 262, "n_highway": 1},
    },
}

# The training keys' defaults (the original recipe's, bilm-tf's `bin/train_elmo.py`, and bilm's own keys),
# as `bilm.options.keys` defines them; `learning_rate` is the default optimizer's own. `n_tokens_vocab` and
# `n_train_tokens` come from the corpus.
TRAINING_DEFAULTS = {
    key.name: (optimizer_class(option_key("optimizer").default).default_learning_rate
               if key.default == OPTIMIZER_DEFAULT else key.default)
    for key in training_keys() if key.default != REQUIRED
}


def get_preset(name):
    """A deep copy of the named preset's options dict."""
    if name not in PRESETS:
        raise UserError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}.")
    return copy.deepcopy(PRESETS[name])


def training_options(name, **keys):
    """The named preset in its training form: `n_characters` 261, the
    `TRAINING_DEFAULTS`, then `keys` (e.g. `n_tokens_vocab`, `batch_size`)."""
    options = get_preset(name)
    options["char_cnn"]["n_characters"] = TRAINING_N_CHARACTERS
    options.update(TRAINING_DEFAULTS)
    # An unknown optimizer keeps the default rate here; training_settings names the bad key.
    options["learning_rate"] = default_learning_rates().get(keys.get("optimizer"), TRAINING_DEFAULTS["learning_rate"])
    options.update(keys)
    return options
