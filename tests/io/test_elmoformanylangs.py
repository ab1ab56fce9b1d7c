"""ELMoForManyLangs models open without PyTorch and equal a NumPy pass written from that project's code."""
import json
import os

import numpy as np
import pytest

import bilm
import efml_models as M
import efml_reference
from bilm.io.formats.torch_pickle import TorchFileError
from bilm.io.sources.elmoformanylangs import ELMoForManyLangsError, read_elmoformanylangs
from bilm.io.sources.model_files import locate_model
from torch_pickles import pickle_bytes, save_state_dict, state_dict

CONTAINERS = ("folder", "zip", "tar.bz2")


def _reference_model(folder, model):
    """The model as the reference reads it: the dictionaries from the files written."""
    words = os.path.join(folder, "word.dic")
    return {**model, "char2id": efml_reference.read_dictionary(os.path.join(folder, "char.dic")),
            "word2id": efml_reference.read_dictionary(words) if os.path.exists(words) else None}


def _opened(tmp_path, folder, container):
    """What bilm.load is given: the folder, or an archive of it with one top folder."""
    if container == "folder":
        return str(folder)
    path = tmp_path / f"xx.model.{container}"
    path.write_bytes(M.archive_bytes(folder, container))
    return str(path)


@pytest.mark.parametrize("layout", ["legacy", "zip"])
@pytest.mark.parametrize("container", CONTAINERS)
def test_all_layers_from_zero_states_equal_the_reference(tmp_path, layout, container):
    folder = tmp_path / "xx.model"
    model = _reference_model(folder, M.write_model(folder, layout))
    elmo = bilm.load(_opened(tmp_path, folder, container), cache_dir=tmp_path / "cache", start="zeros")
    expected = M.reference_layers(model)
    got = elmo.embed(M.SENTENCES, layers="all")
    for sentence, vectors, reference in zip(M.SENTENCES, got, expected):
        assert vectors.shape == (3, len(sentence), 12)
        np.testing.assert_allclose(vectors, reference, rtol=0, atol=1e-5)
    # The test exercises the projection clip (the first LSTM layer has no skip connection).
    assert np.isclose(max(np.abs(r[1]).max() for r in expected if r.size), 1.0)


def test_the_original_output_layers_are_bilm_layers(tmp_path):
    """output_layer -1 (the mean of the three layers), -2 (all), 0, 1, 2."""
    folder = tmp_path / "m"
    model = _reference_model(folder, M.write_model(folder, "zip", seed=3))
    elmo = bilm.load(str(folder), cache_dir=tmp_path / "cache", start="zeros")
    sentences = M.SENTENCES[:3]
    expected = M.reference_layers(model, sentences)
    for output_layer, layers in ((-1, "average"), (0, 0), (1, 1), (2, 2)):
        for vectors, reference in zip(elmo.embed(sentences, layers=layers), expected):
            original = reference.mean(axis=0) if output_layer == -1 else reference[output_layer]
            np.testing.assert_allclose(vectors, original, atol=1e-5)


def test_a_model_without_a_word_embedding_and_with_tanh(tmp_path):
    folder = tmp_path / "m"
    arch = M.architecture(**{"token_embedder.word_dim": 0, "token_embedder.activation": "tanh",
                             "encoder.cell_clip": None, "encoder.proj_clip": 0})
    model = _reference_model(folder, M.write_model(folder, "legacy", seed=1, arch=arch))
    assert not os.path.exists(folder / "word.dic")
    elmo = bilm.load(str(folder), cache_dir=tmp_path / "cache", start="zeros")
    assert elmo.options.word_embedding is None and elmo.options.cell_clip is None
    for vectors, reference in zip(elmo.embed(M.SENTENCES, layers="all"), M.reference_layers(model)):
        np.testing.assert_allclose(vectors, reference, atol=1e-5)


def test_the_conversion_is_made_once_and_again_when_the_folder_changes(tmp_path):
    folder = tmp_path / "m"
    M.write_model(folder)
    first = locate_model(folder, cache_dir=tmp_path / "cache")
    assert first.options_file.startswith(str(tmp_path / "cache" / "converted" / "m-"))
    mtime = os.path.getmtime(first.weight_file)
    assert locate_model(folder, cache_dir=tmp_path / "cache").weight_file == first.weight_file
    assert os.path.getmtime(first.weight_file) == mtime
    M.write_model(folder, seed=5)
    assert locate_model(folder, cache_dir=tmp_path / "cache").weight_file != first.weight_file
    options = json.load(open(first.options_file, encoding="utf-8"))
    characters = options["char_cnn"]["characters"]
    # The begin and end of word ids as the original's batching really uses them.
    assert (characters["begin_of_word"], characters["end_of_word"]) == (
        characters["ids"]["<eow>"], characters["ids"]["<bow>"])


def test_a_missing_architecture_file_is_one_of_the_standard_ones(tmp_path):
    folder = tmp_path / "m"
    M.write_model(folder)
    os.remove(folder / "cnn_small.json")
    config = json.load(open(folder / "config.json"))
    config["config_path"] = "/Users/someone/models/word_elmo/cnn_50_100_512_4096_sample.json"
    (folder / "config.json").write_text(json.dumps(config))
    # The standard architecture's seven convolutions over 50-dimensional characters.
    with pytest.raises(ELMoForManyLangsError, match=r"token_embedder.pkl does not match the architecture.*"
                                                    r"missing 'convolutions.6.weight' \(1024, 50, 7\)"):
        read_elmoformanylangs(folder)
    config["config_path"] = "/Users/someone/models/other.json"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ELMoForManyLangsError, match=r"config.json names the architecture file "
                                                    r"'/Users/someone/models/other.json', which is neither in .* "
                                                    r"nor one of the standard ones"):
        read_elmoformanylangs(folder)


def _break(folder, what):
    """Spoils one part of a model folder as `what` says."""
    if what == "no char.dic":
        os.remove(folder / "char.dic")
    elif what == "char.dic without <bow>":
        ids = efml_reference.read_dictionary(folder / "char.dic")
        del ids["<bow>"]
        M.write_dictionary(folder / "char.dic", ids)
    elif what == "a bad dictionary line":
        with open(folder / "word.dic", "a", encoding="utf-8") as f:
            f.write("dog\tseven\n")
    elif what == "a list pickled":
        (folder / "encoder.pkl").write_bytes(pickle_bytes([1, 2, 3]))
    elif what == "a global":
        payload = state_dict({"w": np.ones(2, np.float32)})
        payload["bad"] = _Call(os.getcwd)
        (folder / "token_embedder.pkl").write_bytes(pickle_bytes(payload, "zip"))
    elif what == "a shape":
        arrays = M.random_model()["encoder"]
        arrays["backward_layer_1.state_projection.weight"] = np.zeros((6, 11), np.float32)
        del arrays["forward_layer_0.state_linearity.bias"]
        save_state_dict(arrays, folder / "encoder.pkl")
    else:
        section, name = what.split(" ")
        arch = json.load(open(folder / "cnn_small.json"))
        arch[section]["name"] = name
        (folder / "cnn_small.json").write_text(json.dumps(arch))


class _Call:
    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


@pytest.mark.parametrize("what, error, message", [
    ("no char.dic", ELMoForManyLangsError, r"holds an ELMoForManyLangs model without its char.dic \(found "),
    ("char.dic without <bow>", ELMoForManyLangsError, r"char.dic lacks the entries <bow>, which the model's ids need"),
    ("a bad dictionary line", ELMoForManyLangsError, r"word.dic, line 12: expected 'entry<TAB>id', got 'dog\\tseven'"),
    ("a list pickled", TorchFileError, r"encoder.pkl holds a list, not a state dict"),
    ("a global", TorchFileError, r"token_embedder.pkl names posix.getcwd, which a file of weights never needs"),
    ("a shape", ELMoForManyLangsError, r"encoder.pkl does not match the architecture and the dictionaries beside it: "
                                       r"missing 'forward_layer_0.state_linearity.bias' \(40,\); "
                                       r"'backward_layer_1.state_projection.weight' has shape \(6, 11\), expected "
                                       r"\(6, 10\)\.$"),
    ("token_embedder lstm", ELMoForManyLangsError, r"cnn_small.json: its token_embedder is 'lstm'; bilm runs "
                                                   r"ELMoForManyLangs' 'cnn' token_embedder"),
    ("encoder lstm", ELMoForManyLangsError, r"its encoder is 'lstm'; bilm runs ELMoForManyLangs' 'elmo' encoder"),
])
def test_bad_input_is_one_line_naming_the_file_before_any_work(tmp_path, what, error, message):
    folder = tmp_path / "m"
    M.write_model(folder)
    _break(folder, what)
    with pytest.raises(error, match=message) as raised:
        bilm.load(str(folder), cache_dir=tmp_path / "cache")
    assert "\n" not in str(raised.value) and str(folder) in str(raised.value)
    assert not (tmp_path / "cache" / "converted").exists() or not os.listdir(tmp_path / "cache" / "converted")
