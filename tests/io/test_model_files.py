"""locate_model: each publisher's layout, zips extracted once and safely, URLs downloaded once, clear errors.

Nothing here touches the internet: URLs are served by the `server` fixture
(tests/local_server.py), which counts the requests it answers.
"""
import json
import os
import re
import tarfile

import pytest

from bilm.io.sources import model_cache
from bilm.io.sources.model_files import ModelFileError, find_model_files, locate_model
from helpers import NLPL_ZIP, zip_bytes

ALLENNLP = "elmo_2x4096_512_2048cnn_2xhighway"


def _files(directory, names):
    """Writes each name (a path below `directory`) with a little content; returns `directory`."""
    for name in names:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'{"corpus": "test"}' if name.endswith("meta.json") else b"x")
    return directory



@pytest.mark.parametrize("layout, names, options, weights", [
    ("bilm", ["options.json", "weights.hdf5"], "options.json", "weights.hdf5"),
    ("dump_weights", ["weights.hdf5", "weights_options.json"], "weights_options.json", "weights.hdf5"),
    # A training directory's options.json beside the dumped pair: the options written with the weights win.
    ("dump_weights in a training directory", ["options.json", "weights.hdf5", "weights_options.json"],
     "weights_options.json", "weights.hdf5"),
    ("dump_weights, other name", ["elmo.hdf5", "elmo_options.json", "train_options.json"],
     "elmo_options.json", "elmo.hdf5"),
    ("NLPL", ["options.json", "model.hdf5", "vocab.txt.gz", "meta.json"], "options.json", "model.hdf5"),
    ("AllenNLP", [f"{ALLENNLP}_options.json", f"{ALLENNLP}_weights.hdf5"],
     f"{ALLENNLP}_options.json", f"{ALLENNLP}_weights.hdf5"),
    ("one top folder", ["model/options.json", "model/model.hdf5", ".DS_Store", "__MACOSX/._x"],
     "model/options.json", "model/model.hdf5"),
])
def test_each_layout_is_found(tmp_path, layout, names, options, weights):
    files = locate_model(_files(tmp_path, names))
    assert files.options_file == str(tmp_path / options) and files.weight_file == str(tmp_path / weights)
    assert files.metadata == ({"corpus": "test"} if layout == "NLPL" else None)
    assert files.vocab_file == (str(tmp_path / "vocab.txt.gz") if layout == "NLPL" else None)


def test_several_models_need_the_options_or_weight_file_of_one(tmp_path):
    _files(tmp_path, ["a_options.json", "a_weights.hdf5", "b_options.json", "b_weights.hdf5"])
    with pytest.raises(ModelFileError, match=r"holds 2 models \(a_options.json \+ a_weights.hdf5; b_options.json "
                                             r"\+ b_weights.hdf5\)\. Pass the options file of the one you want"):
        locate_model(tmp_path)
    assert locate_model(tmp_path / "b_options.json").weight_file == str(tmp_path / "b_weights.hdf5")
    assert locate_model(str(tmp_path / "a_weights.hdf5")).options_file == str(tmp_path / "a_options.json")
    with pytest.raises(ModelFileError, match="holds no model bilm reads for c_options.json"):
        locate_model(_files(tmp_path, ["c_options.json"]) / "c_options.json")


@pytest.mark.parametrize("names, message", [
    # ELMoForManyLangs' files are read (tests/io/test_elmoformanylangs.py); these are not what they say.
    (["config.json", "char.dic", "word.dic", "encoder.pkl", "token_embedder.pkl"],
     r"config.json is not valid JSON"),
    (["saved_model.pb", "tfhub_module.pb", "variables/variables.index", "assets/x"],
     r"holds a TF-Hub module or SavedModel other than a TF1 Hub module of ELMo .*tf.saved_model.load\('.*'\).*"
     r"found saved_model.pb"),
    (["top/char.dic", "top/encoder.pkl"], r"top holds an ELMoForManyLangs model without its config.json"),
    (["options.json", "weights.h5", "notes.txt", "sub/"],
     r"holds no model bilm reads: found notes.txt, options.json, sub/, weights.h5. Expected an options file "
     r"with its HDF5 weights in one directory: options.json \+ weights.hdf5, options.json \+ model.hdf5, "
     r"\*_options.json \+ \*_weights.hdf5, \*_options.json \+ \*.hdf5"),
    ([], "holds no model bilm reads: found nothing"),
])
def test_other_layouts_say_what_they_are(tmp_path, names, message):
    (tmp_path / "m").mkdir()
    _files(tmp_path / "m", [name for name in names if not name.endswith("/")])
    for name in names:
        if name.endswith("/"):
            (tmp_path / "m" / name).mkdir()
    with pytest.raises(ModelFileError, match=message):
        locate_model(tmp_path / "m", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("top", ["", "run/"])
@pytest.mark.parametrize("files, found", [(["checkpoint.npz", "checkpoint-100.npz"], "checkpoint.npz"),
                                          (["jax_checkpoint.npz"], "jax_checkpoint.npz"),
                                          (["checkpoint", "model.ckpt-120.index",
                                            "model.ckpt-120.data-00000-of-00001"], "checkpoint")])
def test_a_training_checkpoint_directory_says_to_dump_the_weights_first(tmp_path, top, files, found):
    _files(tmp_path, [top + name for name in ["options.json", *files]])
    save_dir = tmp_path / top
    with pytest.raises(ModelFileError, match=(
            rf"is a training checkpoint directory \({found}\), without the HDF5 weights "
            rf"bilm.load reads\. Write them first: python bin/dump_weights.py --save_dir "
            rf"{re.escape(str(save_dir).rstrip(os.sep))} --outfile "
            rf"{re.escape(os.path.join(save_dir, 'weights.hdf5'))}, then load that directory\.")):
        locate_model(tmp_path)


@pytest.mark.parametrize("top", ["", "models/"])
def test_models_in_several_folders_are_named(tmp_path, top):
    _files(tmp_path, [top + name for name in ("en/options.json", "en/model.hdf5", "no/elmo_options.json",
                                              "no/elmo_weights.hdf5", "README.txt")])
    with pytest.raises(ModelFileError, match=(
            r"holds several models, one in each of these folders: en/ \(options.json \+ model.hdf5\), no/ "
            rf"\(elmo_options.json \+ elmo_weights.hdf5\)\. Pass the folder of the one you want, e.g. "
            rf"bilm.load\({re.escape(repr(os.path.join(tmp_path, top, 'en')))}\)")):
        locate_model(tmp_path)
    assert locate_model(tmp_path / top / "no").weight_file == str(tmp_path / top / "no" / "elmo_weights.hdf5")


def test_a_zip_of_models_in_several_folders_names_them(tmp_path):
    zip_path = tmp_path / "two.zip"
    zip_path.write_bytes(zip_bytes({"a/options.json": b"{}", "a/model.hdf5": b"x", "b/options.json": b"{}",
                                     "b/model.hdf5": b"x"}))
    with pytest.raises(ModelFileError, match=r"^.*two.zip \(.*\) holds several models, one in each of these "
                                             r"folders: a/ \(options.json \+ model.hdf5\), b/"):
        locate_model(zip_path, cache_dir=tmp_path / "cache")


def test_bad_paths_and_metadata(tmp_path):
    with pytest.raises(FileNotFoundError, match="No model at .*missing: no such file or directory"):
        locate_model(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelFileError, match="notes.txt is neither a model directory, a .zip"):
        locate_model(tmp_path / "notes.txt")
    (tmp_path / "model.zip").write_bytes(NLPL_ZIP[:-30])
    with pytest.raises(ModelFileError, match="model.zip is not a readable zip archive"):
        locate_model(tmp_path / "model.zip")
    with tarfile.open(tmp_path / "module.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "notes.txt", "saved_model.pb")
    with pytest.raises(ModelFileError, match=r"module.tar.gz \(.*\) holds a TF-Hub module or SavedModel other than "
                                             r"a TF1 Hub module of ELMo.*tf.saved_model.load"):
        locate_model(tmp_path / "module.tar.gz", cache_dir=tmp_path / "cache")
    _files(tmp_path / "m", ["options.json", "model.hdf5"])
    (tmp_path / "m" / "meta.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="meta.json is not valid JSON"):
        locate_model(tmp_path / "m")
    with pytest.raises(ValueError, match="sha256= checks a zip or a download; .*m is not a zip"):
        locate_model(tmp_path / "m", sha256="0" * 64)
    with pytest.raises(ValueError, match="sha256 must be 64 hexadecimal digits.*'abc'"):
        locate_model(tmp_path / "m", sha256="abc")


def test_find_model_files_names_the_source_in_errors(tmp_path):
    _files(tmp_path, ["top/notes.txt"])
    with pytest.raises(ModelFileError, match=r"^https://host/m.zip \(.*\) holds no model bilm reads: found top/ "
                                             r"\(top/ holds notes.txt\)\. Expected"):
        find_model_files(tmp_path, source="https://host/m.zip")


def test_metadata_is_a_json_object(tmp_path):
    _files(tmp_path, ["options.json", "model.hdf5"])
    (tmp_path / "meta.json").write_text(json.dumps(["not", "an", "object"]))
    with pytest.raises(ModelFileError, match="meta.json must hold a JSON object. Received a list"):
        locate_model(tmp_path)
    assert model_cache.is_url("HTTPS://host/x.zip") and not model_cache.is_url(str(tmp_path))
