"""The released configurations: their sizes as the model names spell them, copies, the training form."""
import re

import pytest

from bilm.io.sources.published_models import find_published_model
from bilm.optimizers import default_learning_rates
from bilm.options import OptionsError, load_options
from bilm.presets import PRESETS, TRAINING_DEFAULTS, get_preset, training_options
from bilm.training.config.settings import training_settings

# The published models' names: "<n_layers>x<dim>_<projection_dim>_<n_filters>cnn_<n_highway>xhighway".
RELEASED = {"small": "2x1024_128_2048cnn_1xhighway", "medium": "2x2048_256_2048cnn_1xhighway",
            "original": "2x4096_512_2048cnn_2xhighway"}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_released_presets_have_the_sizes_their_names_spell(name):
    n_layers, dim, projection_dim, n_filters, n_highway = map(
        int, re.fullmatch(r"(\d+)x(\d+)_(\d+)_(\d+)cnn_(\d+)xhighway", RELEASED[name]).groups())
    options = load_options(get_preset(name))
    assert (options.n_layers, options.lstm_dim, options.projection_dim) == (n_layers, dim, projection_dim)
    cnn = options.char_cnn
    assert (cnn.n_filters, cnn.n_highway) == (n_filters, n_highway)
    # The original char CNN: 16-dimensional characters, 50 per token, relu, widths 1 to 7.
    assert (cnn.embedding_dim, cnn.max_characters_per_token, cnn.activation) == (16, 50, "relu")
    assert [width for width, _ in cnn.filters] == list(range(1, 8))
    assert (options.cell_clip, options.proj_clip, options.use_skip_connections) == (3, 3, True)


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_a_size_is_the_record_of_its_published_model(name):
    """`--size original` and `bilm.load("allennlp:original")` read one record: the published model's, whose
    weight file's name spells the size."""
    record = find_published_model(f"allennlp:{name}")
    assert get_preset(name) == record.architecture
    assert RELEASED[name] in record.urls[1]
    preset = get_preset(name)
    preset["lstm"]["dim"] = 1  # a copy: the record is left as it was
    assert record.architecture["lstm"]["dim"] != 1


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_prediction_options_with_the_original_keys(name):
    preset = get_preset(name)
    assert set(preset) == {"lstm", "char_cnn"}
    assert set(preset["lstm"]) == {"dim", "projection_dim", "n_layers", "cell_clip", "proj_clip",
                                   "use_skip_connections"}
    assert set(preset["char_cnn"]) == {"activation", "embedding", "filters", "max_characters_per_token",
                                       "n_characters", "n_highway"}
    assert load_options(preset).char_cnn.n_characters == 262


def test_get_preset_returns_a_copy():
    preset = get_preset("tiny")
    preset["lstm"]["dim"] = 1
    preset["char_cnn"]["filters"].append([9, 9])
    assert get_preset("tiny") == PRESETS["tiny"] and PRESETS["tiny"]["lstm"]["dim"] == 64
    assert PRESETS["tiny"]["char_cnn"]["filters"][-1] == [4, 16]


def test_an_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match=r"Unknown preset 'large'; choose one of \['medium', 'original', 'small', "
                                         r"'tiny'\]"):
        get_preset("large")


def test_training_options_are_the_preset_with_training_characters_the_recipe_and_the_keys():
    keys = {"n_tokens_vocab": 30, "n_train_tokens": 1000, "batch_size": 4, "n_negative_samples_batch": 16}
    options = training_options("tiny", **keys)
    assert options["char_cnn"]["n_characters"] == 261
    assert options["lstm"] == PRESETS["tiny"]["lstm"] and PRESETS["tiny"]["char_cnn"]["n_characters"] == 262
    assert {**TRAINING_DEFAULTS, **keys}.items() <= options.items()
    _, settings = training_settings(options)  # valid training options
    assert (settings.batch_size, settings.n_tokens_vocab, settings.unroll_steps) == (4, 30, 20)


def test_the_training_defaults_are_bilm_tfs_recipe():
    # bilm-tf's bin/train_elmo.py.
    assert TRAINING_DEFAULTS == {
        "bidirectional": True, "dropout": 0.1, "all_clip_norm_val": 10.0, "learning_rate": 0.2,
        "sample_softmax": True, "share_embedding_softmax": False, "n_epochs": 10, "batch_size": 128,
        "unroll_steps": 20, "n_negative_samples_batch": 8192,
        # bilm's own keys, off by default: the original arithmetic, no softmax-only warm-up, Adagrad, no
        # bound on the steps; the step compiled with XLA where that is faster (on a GPU).
        "matmul_dtype": "float32", "softmax_warmup_steps": 0, "optimizer": "adagrad", "jit_compile": "auto",
        "max_steps": None}


def test_each_optimizer_starts_from_its_own_learning_rate_unless_given_one():
    keys = {"n_tokens_vocab": 30, "n_train_tokens": 1000}
    adam_rate = training_options("tiny", optimizer="adam", **keys)["learning_rate"]
    assert adam_rate == default_learning_rates()["adam"] == 0.002
    assert training_options("tiny", optimizer="adam", learning_rate=0.01, **keys)["learning_rate"] == 0.01
    assert training_options("tiny", **keys)["learning_rate"] == 0.2
    with pytest.raises(OptionsError, match="'optimizer' must be one of"):  # a clear error, not a KeyError
        training_settings(training_options("tiny", optimizer="sgd", **keys))
    options = training_options("tiny", **keys)
    del options["learning_rate"]
    assert training_settings(dict(options, optimizer="adam"))[1].learning_rate == 0.002
    assert training_settings(options)[1].learning_rate == 0.2
