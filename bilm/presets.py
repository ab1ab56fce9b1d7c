"""The released biLM configurations, as `options.json` dicts (docs/formats.md, "Options").

Prediction options (`n_characters` 262). `training_options` turns one
into the training form with the original recipe's hyperparameters.
"""
import copy

from bilm.errors import UserError
from bilm.optimizers import default_learning_rates
from bilm.options import TRAINING_N_CHARACTERS

_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


def _preset(dim, projection_dim, n_highway):
    return {
        "lstm": {"dim": dim, "projection_dim": projection_dim, "n_layers": 2,
                 "cell_clip": 3, "proj_clip": 3, "use_skip_connections": True},
        "char_cnn": {"activation": "relu", "embedding": {"dim": 16}, "filters": _FILTERS,
                     "max_characters_per_token": 50, "n_characters": 262,
                     "n_highway": n_highway},
    }


PRESETS = {
    "small": _preset(1024, 128, 1),      # 2x1024_128_2048cnn_1xhighway
    "medium": _preset(2048, 256, 1),     # 2x2048_256_2048cnn_1xhighway
    "original": _preset(4096, 512, 2),   # 2x4096_512_2048cnn_2xhighway
    # A toy size for examples and quick checks (not a released model).
    "tiny": {
        "lstm": {"dim": 64, "projection_dim": 16, "n_layers": 2,
                 "cell_clip": 3, "proj_clip": 3, "use_skip_connections": True},
        "char_cnn": {"activation": "relu", "embedding": {"dim": 8},
                     "filters": [[1, 8], [2, 8], [3, 16], [4, 16]],
                     "max_characters_per_token": 50, "n_characters": 262, "n_highway": 1},
    },
}

# The original recipe's training keys (bilm-tf's `bin/train_elmo.py`), the one
# table of training defaults. `n_tokens_vocab` and `n_train_tokens` come from
# the corpus.
TRAINING_DEFAULTS = {
    "bidirectional": True,
    "dropout": 0.1,
    "all_clip_norm_val": 10.0,
    # The default optimizer's own (bilm.optimizers), the original's.
    "learning_rate": 0.2,
    "sample_softmax": True,
    "share_embedding_softmax": False,
    "n_epochs": 10,
    "batch_size": 128,
    "unroll_steps": 20,
    "n_negative_samples_batch": 8192,
    "matmul_dtype": "float32",
    # bilm's own: steps at the start of a run that train the softmax alone,
    # the biLM frozen (a new softmax over a model adapted to new text).
    "softmax_warmup_steps": 0,
    # bilm's own: another optimizer of bilm.optimizers (e.g. "adam"),
    # at its own default learning rate unless the options give one.
    "optimizer": "adagrad",
    # bilm's own: end the run after this many optimizer steps in all (or at
    # n_epochs, whichever comes first); None: n_epochs alone.
    "max_steps": None,
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
