"""The table of options keys (bilm.options.keys) is the only place a key is defined or defaulted: the presets,
the flags of bin/train_elmo.py, parsing, adaptation and the docs' key table all agree with it."""
import argparse
import os
import re

import pytest

from bilm.commands.training_arguments import add_training_arguments
from bilm.optimizers import default_learning_rates
from bilm.options import BiLMOptions, OptionsError
from bilm.options.keys import BOTH, OPTIMIZER_DEFAULT, OPTION_KEYS, REQUIRED, TRAINING, default_text, option_key
from bilm.presets import PRESETS, TRAINING_DEFAULTS, training_options
from bilm.training.config.settings import check_known_keys, training_settings
from bilm.training.model.adaptation import _contradictions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _paths(options, prefix=""):
    for key, value in options.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, dict) and option_key(path).kind == "section":
            yield from _paths(value, f"{path}.")


def test_the_paths_are_unique_and_sections_come_before_their_keys():
    paths = [key.path for key in OPTION_KEYS]
    assert len(paths) == len(set(paths))
    for i, key in enumerate(OPTION_KEYS):
        if key.section:
            assert option_key(key.section).kind == "section"
            assert paths.index(key.section) < i


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_key_of_every_preset_is_in_the_table(name):
    options = training_options(name, n_tokens_vocab=10, n_train_tokens=100)
    for path in _paths(options):
        assert option_key(path).used_by in (BOTH, TRAINING), path
    check_known_keys(BiLMOptions.from_dict(options))


def test_the_training_defaults_are_the_tables():
    table = {key.name: key.default for key in OPTION_KEYS if key.used_by == TRAINING and key.default != REQUIRED}
    assert set(TRAINING_DEFAULTS) == set(table)
    for name, default in table.items():
        expected = default_learning_rates()[table["optimizer"]] if default == OPTIMIZER_DEFAULT else default
        assert TRAINING_DEFAULTS[name] == expected, name
    # What parsing gives for absent keys.
    _, settings = training_settings(training_options("tiny", n_tokens_vocab=10000, n_train_tokens=100))
    for name, default in TRAINING_DEFAULTS.items():
        assert getattr(settings, name) == default, name


def test_every_flag_is_a_table_key_marked_as_one_and_says_its_default():
    parser = argparse.ArgumentParser()
    actions = {action.dest: action for action in add_training_arguments(parser)}
    flagged = {key.name for key in OPTION_KEYS if key.flag}
    assert flagged <= set(actions)
    for dest in set(actions) - flagged:
        with pytest.raises(KeyError):
            option_key(dest)  # a flag of the run (--seed, --save_dir, ...), not an options key
    for name in flagged - {"n_train_tokens", "matmul_dtype", "learning_rate"}:
        assert f"else {default_text(option_key(name))})" in actions[name].help, name


def test_absent_model_keys_mean_the_tables_default():
    cnn = {key: value for key, value in PRESETS["tiny"]["char_cnn"].items() if key != "n_highway"}
    options = BiLMOptions.from_dict({"lstm": {"dim": 8, "projection_dim": 4, "n_layers": 1}, "char_cnn": cnn})
    assert options.use_skip_connections is option_key("lstm.use_skip_connections").default
    assert options.cell_clip is option_key("lstm.cell_clip").default
    assert options.char_cnn.n_highway == option_key("char_cnn.n_highway").default
    # Adaptation compares a repeated key with the model's, absent meaning the default.
    assert _contradictions("lstm", {"use_skip_connections": False, "cell_clip": None}, {}) == []
    assert _contradictions("lstm", {"use_skip_connections": True}, {}) != []


def test_the_checks_of_the_kinds():
    with pytest.raises(OptionsError, match=r"training key 'batch_size' must be an integer >= 1, got 0"):
        option_key("batch_size").check(0, "f.json")
    with pytest.raises(OptionsError, match=r"training key 'dropout' must be a number in \[0.0, 1.0\), got 1"):
        option_key("dropout").check(1, "f.json")
    with pytest.raises(OptionsError, match="'bidirectional' must be true or false"):
        option_key("bidirectional").check("yes", "f.json")
    assert option_key("max_steps").check(None, "f.json") is None
    assert option_key("softmax_warmup_steps").check(0, "f.json") == 0


def test_the_docs_key_table_is_the_table():
    text = open(os.path.join(ROOT, "docs", "formats.md"), encoding="utf-8").read()
    rows = re.findall(r"^\| `([a-z_.]+)` \| ([a-z ]+) \| ([^|]+) \| ([^|]+) \|$", text, flags=re.MULTILINE)
    assert [row[0] for row in rows] == [key.path for key in OPTION_KEYS]
    for (path, used_by, default, meaning), key in zip(rows, OPTION_KEYS, strict=True):
        assert (used_by, default.strip(), meaning.strip()) == (key.used_by, default_text(key), key.meaning), path
