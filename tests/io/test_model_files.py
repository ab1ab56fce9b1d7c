"""locate_model: each publisher's layout, zips extracted once and safely, URLs downloaded once, clear errors.

Nothing here touches the internet: URLs are served by the `server` fixture
(tests/local_server.py), which counts the requests it answers.
"""
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import zipfile

import pytest
from local_server import Response

from bilm.io import model_cache
from bilm.io.model_files import ModelFileError, find_model_files, locate_model

ALLENNLP = "elmo_2x4096_512_2048cnn_2xhighway"


def _files(directory, names):
    """Writes each name (a path below `directory`) with a little content; returns `directory`."""
    for name in names:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'{"corpus": "test"}' if name.endswith("meta.json") else b"x")
    return directory


def _zip_bytes(members):
    """A zip of `{name: bytes}`, as bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


NLPL_ZIP = _zip_bytes({"elmo/options.json": b"{}", "elmo/model.hdf5": b"x", "elmo/vocab.txt": b"the\n",
                       "elmo/meta.json": b'{"corpus": "Wikipedia", "id": 222}'})


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
    (["config.json", "char.dic", "word.dic", "encoder.pkl", "token_embedder.pkl"],
     r"holds an ELMoForManyLangs model, a different model family .* that bilm does not read.*found char.dic, "
     "word.dic, encoder.pkl, token_embedder.pkl"),
    (["saved_model.pb", "tfhub_module.pb", "variables/variables.index", "assets/x"],
     r"holds a TF-Hub module \(a TensorFlow SavedModel\).*tf.saved_model.load\('.*'\).*found saved_model.pb"),
    (["top/config.json", "top/char.dic", "top/encoder.pkl"], r"\(.*top\) holds an ELMoForManyLangs model"),
    (["options.json", "weights.h5", "notes.txt", "sub/"],
     r"holds no model bilm reads: found notes.txt, options.json, sub/, weights.h5. Expected an options file "
     r"with its HDF5 weights in one directory: options.json \+ weights.hdf5, options.json \+ model.hdf5, "
     r"\*_options.json \+ \*_weights.hdf5, \*_options.json \+ \*.hdf5"),
    ([], "holds no model bilm reads: found nothing"),
])
def test_other_layouts_say_what_they_are(tmp_path, names, message):
    _files(tmp_path, [name for name in names if not name.endswith("/")])
    for name in names:
        if name.endswith("/"):
            (tmp_path / name).mkdir()
    with pytest.raises(ModelFileError, match=message):
        locate_model(tmp_path)


@pytest.mark.parametrize("top", ["", "run/"])
def test_a_training_checkpoint_directory_says_to_dump_the_weights_first(tmp_path, top):
    _files(tmp_path, [top + name for name in ("options.json", "checkpoint", "model.ckpt-120.index",
                                              "model.ckpt-120.data-00000-of-00001")])
    save_dir = tmp_path / top
    with pytest.raises(ModelFileError, match=(
            rf"is a training checkpoint directory \(checkpoint, model.ckpt-\*\), without the HDF5 weights "
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
    zip_path.write_bytes(_zip_bytes({"a/options.json": b"{}", "a/model.hdf5": b"x", "b/options.json": b"{}",
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
    with pytest.raises(ModelFileError, match="module.tar.gz is a tar archive.*tf.saved_model.load"):
        locate_model(tmp_path / "module.tar.gz")
    _files(tmp_path / "m", ["options.json", "model.hdf5"])
    (tmp_path / "m" / "meta.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="meta.json is not valid JSON"):
        locate_model(tmp_path / "m")
    with pytest.raises(ValueError, match="sha256= checks a zip or a download; .*m is not a zip"):
        locate_model(tmp_path / "m", sha256="0" * 64)
    with pytest.raises(ValueError, match="sha256 must be 64 hexadecimal digits.*'abc'"):
        locate_model(tmp_path / "m", sha256="abc")


def test_a_zip_is_extracted_once_and_again_when_replaced(tmp_path, monkeypatch):
    zip_path = tmp_path / "222.zip"
    zip_path.write_bytes(NLPL_ZIP)
    cache = tmp_path / "cache"
    extractions = []
    real_extractall = zipfile.ZipFile.extractall
    monkeypatch.setattr(zipfile.ZipFile, "extractall",
                        lambda self, path, *a, **k: (extractions.append(path), real_extractall(self, path, *a, **k)))
    files = locate_model(zip_path, cache_dir=cache)
    assert files.metadata == {"corpus": "Wikipedia", "id": 222} and files.source == str(zip_path)
    assert files.options_file.startswith(str(cache / "extracted" / "222-"))
    assert files.options_file.endswith(os.path.join("elmo", "options.json"))
    assert files.vocab_file.endswith("vocab.txt")
    assert locate_model(str(zip_path), cache_dir=cache) == files
    assert len(extractions) == 1
    assert [p.name for p in (cache / "extracted").iterdir()] == [os.path.basename(os.path.dirname(files.directory))]

    sha256 = hashlib.sha256(NLPL_ZIP).hexdigest()
    assert locate_model(zip_path, cache_dir=cache, sha256=sha256.upper()) == files
    with pytest.raises(ModelFileError, match=f"222.zip has SHA-256 {sha256}, not the expected sha256='1111"):
        locate_model(zip_path, cache_dir=cache, sha256="1" * 64)

    zip_path.write_bytes(_zip_bytes({"options.json": b"{}", "weights.hdf5": b"y"}))
    os.utime(zip_path, ns=(1, 1))
    replaced = locate_model(zip_path, cache_dir=cache)
    assert len(extractions) == 2 and replaced.directory != files.directory
    assert os.path.basename(replaced.weight_file) == "weights.hdf5"


def test_a_zip_with_members_outside_its_folder_is_refused_whole(tmp_path):
    # keras.utils.get_file(extract=True) would skip these members with a warning
    # and extract the rest; bilm refuses the archive before writing anything.
    cache = tmp_path / "cache"
    outside = tmp_path / "absolute_evil.txt"
    zip_path = tmp_path / "evil.zip"
    zip_path.write_bytes(_zip_bytes({"options.json": b"{}", "weights.hdf5": b"x", "../evil.txt": b"!",
                                     "sub/../../../evil2.txt": b"!", str(outside): b"!"}))
    with pytest.raises(ModelFileError, match=r"evil.zip has members that would be written outside the folder "
                                             r"it is extracted to: '../evil.txt', 'sub/../../../evil2.txt', "
                                             f"'{outside}'. A model archive never needs them"):
        locate_model(zip_path, cache_dir=cache)
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert written == ["cache", "cache/extracted", "evil.zip"]


def test_a_zip_with_a_corrupt_member_names_the_file(tmp_path):
    data = bytearray(_zip_bytes({"options.json": b"{}", "weights.hdf5": b"0123456789" * 10}))
    data[data.index(b"0123456789") + 5] ^= 1
    zip_path = tmp_path / "bad.zip"
    zip_path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"bad.zip is not a readable zip archive \(Bad CRC-32"):
        locate_model(zip_path, cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache" / "extracted").iterdir()) == []


def test_a_url_is_downloaded_and_extracted_once(tmp_path, server, monkeypatch, capsys):
    server.routes["/repository/222.zip"] = NLPL_ZIP
    url = server.url("/repository/222.zip")
    monkeypatch.setenv("BILM_CACHE", str(tmp_path / "env_cache"))
    files = locate_model(url)
    assert server.requests == ["/repository/222.zip"]
    assert f"Downloading data from {url}" in capsys.readouterr().out
    assert files.source == url and files.metadata["id"] == 222
    downloads = tmp_path / "env_cache" / "downloads"
    (key,) = os.listdir(downloads)
    assert os.listdir(downloads / key) == ["222.zip"]
    assert (downloads / key / "222.zip").read_bytes() == NLPL_ZIP
    assert files.directory.startswith(str(tmp_path / "env_cache" / "extracted" / "222-"))
    assert locate_model(url) == files
    assert len(server.requests) == 1
    sha256 = hashlib.sha256(NLPL_ZIP).hexdigest()
    assert locate_model(url, sha256=sha256) == files
    assert len(server.requests) == 1

    # The file at the URL changed: a cached copy that differs from sha256 is downloaded again.
    server.routes["/repository/222.zip"] = new = _zip_bytes({"options.json": b"{}", "model.hdf5": b"z"})
    assert locate_model(url, sha256=hashlib.sha256(new).hexdigest()).metadata is None
    assert len(server.requests) == 2


def test_download_progress_off_a_terminal_is_plain_lines(tmp_path, server, capsys):
    server.routes["/222.zip"] = NLPL_ZIP
    url = server.url("/222.zip")
    locate_model(url, cache_dir=tmp_path / "cache")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\b" not in out, repr(out)
    lines = out.splitlines()
    assert lines[0] == f"Downloading data from {url}"
    assert lines[-1].startswith("1/1 [========================] - 0s in all"), lines


def test_download_progress_on_a_terminal_is_redrawn_in_place(tmp_path, server, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    server.routes["/222.zip"] = NLPL_ZIP
    locate_model(server.url("/222.zip"), cache_dir=tmp_path / "cache")
    assert "\r1/1 [========================] - 0s in all" in terminal.getvalue()


def test_a_failed_download_names_the_url_and_keeps_nothing(tmp_path, server):
    cache = tmp_path / "cache"
    server.routes["/model.zip"] = NLPL_ZIP
    # Promises more bytes than it sends, then hangs up.
    server.routes["/short.zip"] = Response(NLPL_ZIP[:50], content_length=100000)
    server.routes["/page.zip"] = b"<html><body>Please log in</body></html>"
    with pytest.raises(ModelFileError, match=r"Cannot download http://127.0.0.1:\d+/missing.zip: HTTP 404 Not Found"):
        locate_model(server.url("/missing.zip"), cache_dir=cache)
    with pytest.raises(ModelFileError, match=r"Cannot download .*/short.zip: the connection ended after 50 of the "
                                             r"100,000 bytes the server announced \(Content-Length\); the partial "
                                             "file was not kept"):
        locate_model(server.url("/short.zip"), cache_dir=cache)
    with pytest.raises(ModelFileError, match=r"page.zip gave a file that is not a zip archive \(39 bytes "
                                             r"starting b'<html><body>Please log in"):
        locate_model(server.url("/page.zip"), cache_dir=cache)
    sha256 = hashlib.sha256(NLPL_ZIP).hexdigest()
    with pytest.raises(ModelFileError, match=f"downloaded from .*/model.zip has SHA-256 {sha256}, not the "
                                             "expected sha256='0000.*it was not kept"):
        locate_model(server.url("/model.zip"), cache_dir=cache, sha256="0" * 64)
    assert [p for p in cache.rglob("*") if p.is_file()] == []
    with pytest.raises(ModelFileError, match="Cannot download http://127.0.0.1:1/x.zip: "):
        locate_model("http://127.0.0.1:1/x.zip", cache_dir=cache)


@pytest.mark.parametrize("content_length", ["true", "none"])
def test_a_truncated_zip_download_is_called_truncated_and_not_kept(tmp_path, server, content_length):
    # The server's copy itself is cut short: the transfer is complete, the zip is not.
    truncated = NLPL_ZIP[:len(NLPL_ZIP) // 2]
    server.routes["/222.zip"] = Response(truncated, len(truncated) if content_length == "true" else None)
    cache = tmp_path / "cache"
    with pytest.raises(ModelFileError, match=(
            rf"^http://127.0.0.1:\d+/222.zip gave a truncated or corrupt zip archive \({len(truncated)} bytes: it "
            r"starts as a zip but has no end record\); it was not kept\. Download it again, or check the copy "
            r"at that address\.$")):
        locate_model(server.url("/222.zip"), cache_dir=cache)
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_a_downloaded_zip_that_does_not_extract_is_not_kept(tmp_path, server):
    data = bytearray(_zip_bytes({"options.json": b"{}", "weights.hdf5": b"0123456789" * 10}))
    data[data.index(b"0123456789") + 5] ^= 1
    server.routes["/bad.zip"] = bytes(data)
    cache = tmp_path / "cache"
    with pytest.raises(ModelFileError, match=r"bad.zip is not a readable zip archive \(Bad CRC-32.*The "
                                             r"download from http://127.0.0.1:\d+/bad.zip was not kept\.$"):
        locate_model(server.url("/bad.zip"), cache_dir=cache)
    assert [p for p in cache.rglob("*") if p.is_file()] == []


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
