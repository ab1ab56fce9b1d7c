"""write_random_model: a random biLM in the original layout, in prediction form, reproducible from a seed."""
import json

import numpy as np
import pytest

import numpy_reference as R
from bilm.io.formats.weight_file import load_bilm_weights
from bilm.models.functional_bilm import build_bilm
from bilm.models.random_weights import write_random_model
from bilm.options import load_options, save_options

OPTIONS = R.make_options(n_characters=261)  # training options: the written ones are for prediction


def test_the_files_hold_prediction_options_and_every_weight_of_the_original_layout(tmp_path):
    options_file, weight_file = write_random_model(tmp_path / "new" / "model", OPTIONS, seed=1)
    assert (options_file, weight_file) == (str(tmp_path / "new" / "model" / "options.json"),
                                           str(tmp_path / "new" / "model" / "weights.hdf5"))
    with open(options_file) as f:
        written = json.load(f)
    assert written["char_cnn"]["n_characters"] == 262 and written["lstm"] == OPTIONS["lstm"]
    weights = R.read_weights(weight_file)
    assert {name: array.shape for name, array in weights.items()} == R.expected_weight_shapes(OPTIONS)
    assert all(np.abs(array).max() > 0 for name, array in weights.items() if "W" in name)
    network = build_bilm(load_options(options_file))
    load_bilm_weights(network, weight_file)  # bilm reads them back
    np.testing.assert_array_equal(network.get_layer("char_cnn").char_embedding.numpy()[1:], weights["char_embed"])


def test_a_seed_writes_the_same_weights_and_no_seed_others(tmp_path):
    def weights(name, seed):
        return R.read_weights(write_random_model(tmp_path / name, OPTIONS, seed=seed)[1])

    first, again, other = weights("a", 3), weights("b", 3), weights("c", 4)
    unseeded = [weights("d", None), weights("e", None)]
    for name in first:
        np.testing.assert_array_equal(again[name], first[name], err_msg=name)
    assert any(not np.array_equal(other[name], first[name]) for name in first)
    assert any(not np.array_equal(unseeded[0][name], unseeded[1][name]) for name in first)


@pytest.mark.parametrize("form", ["BiLMOptions", "path"])
def test_options_may_be_parsed_or_a_file(tmp_path, form):
    options = load_options(OPTIONS)
    if form == "path":
        save_options(options, tmp_path / "training_options.json")
        options = str(tmp_path / "training_options.json")
    options_file, _ = write_random_model(tmp_path / "model", options, seed=0)
    assert load_options(options_file).char_cnn.n_characters == 262
