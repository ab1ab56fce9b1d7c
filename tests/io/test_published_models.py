"""Published models by name: the table, fetched through a mirror served on 127.0.0.1, never shadowing a path."""
import io
import os
import urllib.parse
import zipfile

import numpy as np
import pytest

import bilm
import efml_models
import efml_reference
from bilm.io.sources.model_files import ModelFileError, locate_model
from bilm.io.sources.published_models import PUBLISHED_MODELS, find_published_model, may_be_model_name
from helpers import SENTENCES, write_model

SMALL = PUBLISHED_MODELS["allennlp:small"]


@pytest.fixture
def model_bytes(tmp_path_factory):
    """A tiny model's `(options.json bytes, weights.hdf5 bytes)`."""
    options_file, weight_file, _ = write_model(tmp_path_factory.mktemp("tiny"))
    with open(options_file, "rb") as f, open(weight_file, "rb") as g:
        return f.read(), g.read()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BILM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BILM_MODEL_MIRROR", raising=False)
    return tmp_path / "cache"


def _path(url):
    return urllib.parse.urlsplit(url).path


def test_the_table():
    for name, model in PUBLISHED_MODELS.items():
        assert model.name == name and model.description and model.published_at.startswith("https://")
        assert may_be_model_name(name) and find_published_model(name) is model
        assert name.startswith(("allennlp:", "nlpl:", "efml:")), name
        assert len(model.urls) == (1 if name.startswith(("nlpl:", "efml:")) else 2), name
        assert all(url.startswith(("http://", "https://")) for url in model.urls)
        assert len({os.path.basename(_path(url)) for url in model.urls}) == len(model.urls), name
        assert set(model.sha256) <= set(model.urls)
        if not model.is_zip:
            assert model.urls[0].endswith(".json") and model.urls[1].endswith(".hdf5"), name
            assert _path(model.urls[0]).startswith("/allennlp/models/elmo/"), name
    assert PUBLISHED_MODELS["nlpl:209"].urls == ("http://vectors.nlpl.eu/repository/20/209.zip",)
    folder = "http://host/m/allennlp/models/elmo/2x1024_128_2048cnn_1xhighway/"
    assert SMALL.file_urls("http://host/m/") == (folder + "elmo_2x1024_128_2048cnn_1xhighway_options.json",
                                                 folder + "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5")
    assert not any(may_be_model_name(p) for p in ["model.zip", "dir/small", "w.hdf5", "https://h/x", ""])


def test_load_opens_a_two_file_model_through_the_mirror_once(server, cache, monkeypatch, model_bytes):
    options, weights = model_bytes
    for url, body in zip(SMALL.urls, model_bytes):
        server.routes["/mirror" + _path(url)] = body
    monkeypatch.setenv("BILM_MODEL_MIRROR", server.url("/mirror/"))
    with pytest.warns(UserWarning, match="holds no boundary state"):  # as every published model
        elmo = bilm.load("allennlp:small")
    assert len(server.requests) == 2 and all(r.startswith("/mirror/allennlp/models/elmo/") for r in server.requests)
    assert os.path.basename(elmo.weight_file) == "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5"
    assert elmo.weight_file.startswith(str(cache / "downloads"))
    assert os.path.dirname(elmo.weight_file) == os.path.dirname(elmo.options_file)
    assert [v.shape for v in elmo.embed(SENTENCES[:2])] == [(len(s), elmo.dim) for s in SENTENCES[:2]]
    assert locate_model("allennlp:small").weight_file == elmo.weight_file
    # The name before the prefix still works, with a warning naming the new one, and finds the same cached files.
    old_name = r"^The model name 'small' is deprecated; use 'allennlp:small'"
    with pytest.warns(DeprecationWarning, match=old_name) as caught:
        assert locate_model("small").weight_file == elmo.weight_file
    assert [w.filename for w in caught if issubclass(w.category, DeprecationWarning)] == [__file__]
    with pytest.warns(DeprecationWarning, match=old_name) as caught:
        assert bilm.load("small", start="zeros").weight_file == elmo.weight_file
    assert [w.filename for w in caught if issubclass(w.category, DeprecationWarning)] == [__file__]
    assert len(server.requests) == 2


def test_an_nlpl_zip_through_a_mirror_argument(server, cache, model_bytes):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("options.json", model_bytes[0])
        archive.writestr("model.hdf5", model_bytes[1])
        archive.writestr("meta.json", b'{"id": 209}')
    server.routes["/repository/20/209.zip"] = buffer.getvalue()
    files = locate_model("nlpl:209", mirror=server.url())
    assert server.requests == ["/repository/20/209.zip"]
    assert files.source == "nlpl:209" and files.metadata == {"id": 209}
    assert files.weight_file.startswith(str(cache / "extracted" / "209-"))


def test_a_mirror_may_be_a_local_directory(tmp_path, cache, model_bytes):
    mirror = tmp_path / "mirror"
    for url, body in zip(SMALL.urls, model_bytes):
        (mirror / _path(url).lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (mirror / _path(url).lstrip("/")).write_bytes(body)
    files = locate_model("allennlp:small", mirror=str(mirror))
    with open(files.weight_file, "rb") as f:
        assert f.read() == model_bytes[1]


def test_a_local_path_of_that_name_wins(tmp_path, cache, monkeypatch, server):
    monkeypatch.setenv("BILM_MODEL_MIRROR", server.url())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").mkdir()
    write_model(tmp_path / "small")
    assert locate_model("small").weight_file == os.path.join("small", "weights.hdf5")
    assert server.requests == []


def test_unknown_names_and_bad_arguments(cache, tmp_path):
    with pytest.raises(ModelFileError, match=(
            r"^No model at 'smal': no such file or directory, and no published model has that name\. Did you mean "
            r"'allennlp:small'\? Published names: allennlp:small, allennlp:medium, allennlp:original, "
            r"allennlp:original-5\.5b, allennlp:pubmed, .*nlpl:209, .*\.$")):
        bilm.load("smal")
    with pytest.raises(ValueError, match=r"nlpl:12 is not one of the NLPL repository's ELMo models bilm lists "
                                         r"\(nlpl:201, .*pass its URL: bilm.load\('http://vectors.nlpl.eu/"
                                         r"repository/20/12.zip'\)"):
        locate_model("nlpl:12")
    with pytest.raises(ValueError, match="sha256= checks a zip; allennlp:small is two files"):
        locate_model("allennlp:small", sha256="0" * 64)
    with pytest.raises(ValueError, match="mirror= applies to published model names; '.*' is a path or URL"):
        locate_model(str(tmp_path), mirror="http://host/")
    with pytest.raises(FileNotFoundError, match="No model at .*missing.zip: no such file"):
        locate_model("missing.zip")


def test_a_mirror_page_instead_of_a_file_is_not_kept(server, cache, model_bytes):
    options_url, weights_url = SMALL.urls
    server.routes[_path(options_url)] = model_bytes[0]
    server.routes[_path(weights_url)] = b"<html>Not here</html>"
    with pytest.raises(ValueError, match=r"/elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5 gave a file that is "
                                         r"not HDF5 \(21 bytes starting b'<html>Not here</html>'\); it was not kept"):
        locate_model("allennlp:small", mirror=server.url())
    kept = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert kept == ["elmo_2x1024_128_2048cnn_1xhighway_options.json"]


def test_elmoformanylangs_names_through_a_mirror(server, cache, tmp_path):
    """`efml:<language>` and `nlpl:<id>` name one download; `efml:zhs` is a tar.bz2 elsewhere."""
    folder = tmp_path / "fi.model"
    model = efml_models.write_model(folder, "legacy")
    model.update(char2id=efml_reference.read_dictionary(folder / "char.dic"),
                 word2id=efml_reference.read_dictionary(folder / "word.dic"))
    server.routes["/repository/11/149.zip"] = efml_models.archive_bytes(folder, "zip", top="fi.model")
    server.routes["/zhs.model.tar.bz2"] = efml_models.archive_bytes(folder, "tar.bz2", top="zhs.model")
    assert PUBLISHED_MODELS["efml:fi"].urls == PUBLISHED_MODELS["nlpl:149"].urls == (
        "http://vectors.nlpl.eu/repository/11/149.zip",)
    elmo = bilm.load("efml:fi", mirror=server.url(), start="zeros")
    assert server.requests == ["/repository/11/149.zip"]
    want = efml_models.reference_layers(model)
    for got, expected in zip(elmo.embed(efml_models.SENTENCES, layers="all"), want):
        np.testing.assert_allclose(got, expected, atol=1e-5)
    assert locate_model("nlpl:149", mirror=server.url()).weight_file == elmo.weight_file
    assert server.requests == ["/repository/11/149.zip"]
    chinese = bilm.load("efml:zhs", mirror=server.url(), start="zeros")
    assert server.requests[-1] == "/zhs.model.tar.bz2"
    np.testing.assert_allclose(chinese.embed(efml_models.SENTENCES[:1], layers="all")[0], want[0], atol=1e-5)
    names = [name for name in PUBLISHED_MODELS if name.startswith("efml:")]
    assert len(names) == 45 and {"efml:fi", "efml:nb", "efml:nn", "efml:grc", "efml:zh", "efml:zhs"} <= set(names)
    assert sorted(int(name[5:]) for name in PUBLISHED_MODELS if name.startswith("nlpl:1")) == list(range(136, 180))
