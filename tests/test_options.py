"""options.json validation: clear errors that name the file and the key."""
import json

import pytest

import numpy_reference as R
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.options import OptionsError, load_options, save_options


def _write(tmp_path, options):
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options) if not isinstance(options, str) else options)
    return str(path)


def test_released_layout_loads(tmp_path):
    options = load_options(_write(tmp_path, R.make_options(n_highway=2)))
    assert options.lstm_dim == 8 and options.projection_dim == 6 and options.n_layers == 2
    assert options.cell_clip == 3.0 and options.use_skip_connections
    assert options.char_cnn.filters == ((1, 4), (2, 5), (3, 6)) and options.char_cnn.n_filters == 15
    assert options.char_cnn.n_highway == 2


@pytest.mark.parametrize("n_characters", [261, 262])
def test_both_n_characters_load_for_prediction(n_characters):
    options = load_options(R.make_options(n_characters=n_characters))
    assert options.for_prediction().char_cnn.n_characters == 262


@pytest.mark.parametrize("mutate, key", [
    (lambda o: o["lstm"].pop("dim"), "lstm.dim"),
    (lambda o: o["lstm"].__setitem__("n_layers", "2"), "lstm.n_layers"),
    (lambda o: o.pop("lstm"), "'lstm'"),
    (lambda o: o["char_cnn"].__setitem__("activation", "gelu"), "char_cnn.activation"),
    (lambda o: o["char_cnn"].pop("max_characters_per_token"), "char_cnn.max_characters_per_token"),
    (lambda o: o["char_cnn"].__setitem__("n_characters", 300), "char_cnn.n_characters"),
    (lambda o: o["char_cnn"].__setitem__("filters", [[1, 4], [2]]), r"char_cnn.filters\[1\]"),
    (lambda o: o["lstm"].__setitem__("projection_dim", 99), "projection_dim"),
])
def test_bad_options_name_the_key_and_file(tmp_path, mutate, key):
    options = R.make_options()
    mutate(options)
    path = _write(tmp_path, options)
    with pytest.raises(OptionsError, match=key) as error:
        load_options(path)
    assert path in str(error.value)


@pytest.mark.parametrize("section, typo, key", [
    ("lstm", "projection_dims", "lstm.projection_dim"),
    ("lstm", "n_layer", "lstm.n_layers"),
    ("char_cnn", "embeding", "char_cnn.embedding"),
    ("char_cnn", "activaton", "char_cnn.activation"),
])
def test_a_missing_key_names_the_typo_beside_it(tmp_path, section, typo, key):
    options = R.make_options()
    options[section][typo] = options[section].pop(key.split(".")[-1])
    with pytest.raises(OptionsError, match=rf"missing key '{key}'. The file has '{section}.{typo}': did you mean "
                                           rf"'{key}'\?"):
        load_options(_write(tmp_path, options))


@pytest.mark.parametrize("value", ["yes", "true", 2, [True]])
def test_booleans_are_json_booleans(tmp_path, value):
    options = R.make_options()
    options["lstm"]["use_skip_connections"] = value
    with pytest.raises(OptionsError, match="'lstm.use_skip_connections' must be true or false"):
        load_options(_write(tmp_path, options))
    options["lstm"]["use_skip_connections"] = False
    assert not load_options(_write(tmp_path, options)).use_skip_connections


def test_not_json(tmp_path):
    path = _write(tmp_path, "{'lstm': nope")
    with pytest.raises(OptionsError, match="not a valid JSON options file"):
        load_options(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_options(str(tmp_path / "nope.json"))


def test_round_trip_keeps_training_keys(tmp_path):
    raw = R.make_options()
    raw.update({"batch_size": 128, "dropout": 0.1, "n_tokens_vocab": 42})
    options = load_options(raw)
    save_options(options, str(tmp_path / "o.json"))
    again = load_options(str(tmp_path / "o.json"))
    assert again == options and again.get("n_tokens_vocab") == 42 and again.to_dict() == raw


def test_token_model_needs_embedding_file(tmp_path):
    with pytest.raises(ValueError, match="embedding_weight_file"):
        BidirectionalLanguageModel(R.make_options(), "unused.hdf5", use_character_inputs=False)


def test_char_model_needs_char_cnn():
    with pytest.raises(ValueError, match="char_cnn"):
        BidirectionalLanguageModel(R.make_options(char_cnn=False), "unused.hdf5")


def _dictionary_options(n_characters=7):
    options = R.make_options(n_characters=n_characters)
    options["char_cnn"]["characters"] = {
        "ids": {"a": 0, "b": 1, "<pad>": 2}, "begin_of_word": 3, "end_of_word": 4, "padding": 2, "unknown": 5,
        "sentence_start": 5, "sentence_end": 6, "boundary_tokens": ["<bos>", "<eos>"]}
    options["word_embedding"] = {"dim": 2, "ids": {"a": 0, "<oov>": 1}, "unknown": 1}
    return options


def test_a_models_own_dictionaries_set_the_tables_and_the_id_width():
    options = load_options(_dictionary_options())
    assert options.char_cnn.characters.n_ids == 7 and options.char_cnn.training_n_characters == 7
    assert options.word_embedding.dim == 2 and options.word_embedding.dictionary.unknown == 1
    assert options.token_id_width == 8
    prediction = options.for_prediction()
    assert prediction.char_cnn.n_characters == 8 and prediction.for_training().char_cnn.n_characters == 7
    assert load_options(prediction.to_dict()) == prediction
    tokens_only = options.for_prediction(use_character_inputs=False)
    assert tokens_only.char_cnn is None and tokens_only.word_embedding is None


@pytest.mark.parametrize("mutate, message", [
    (lambda o: o["char_cnn"].update(n_characters=262), r"'char_cnn.n_characters' must be 7 \(training\) or 8"),
    (lambda o: o["char_cnn"]["characters"].update(ids=["a"]), r"'char_cnn.characters.ids' must be an object"),
    (lambda o: o["char_cnn"]["characters"].pop("unknown"), r"missing key 'char_cnn.characters.unknown'"),
    (lambda o: o["char_cnn"]["characters"].update(boundary_tokens=["<s>", "<s>"]),
     r"'char_cnn.characters.boundary_tokens' must be two different tokens"),
    (lambda o: o["word_embedding"].update(ids={"a": -1}), r"'word_embedding.ids' must be an object"),
    (lambda o: o.pop("char_cnn"), r"'word_embedding' goes with a 'char_cnn' section"),
])
def test_bad_dictionaries_name_the_key(mutate, message):
    options = _dictionary_options()
    mutate(options)
    with pytest.raises(OptionsError, match=message):
        load_options(options)
