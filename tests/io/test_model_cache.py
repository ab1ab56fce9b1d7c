"""The model cache: zips extracted once and safely, URLs downloaded once, failures that leave nothing.

Most tests go through `locate_model`, the way bilm reaches the cache.
Nothing here touches the internet: URLs are served by the `server` fixture
(tests/io/local_server.py, on 127.0.0.1), which counts the requests it
answers, or are `file://` URLs.
"""
import hashlib
import io
import os
import sys
import urllib.request
import zipfile

import pytest

from bilm.io.sources import model_cache
from bilm.io.sources.model_cache import ModelFileError, check_sha256, default_cache_dir, download, is_url
from bilm.io.sources.model_files import locate_model
from helpers import NLPL_ZIP, zip_bytes
from local_server import Response


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

    zip_path.write_bytes(zip_bytes({"options.json": b"{}", "weights.hdf5": b"y"}))
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
    zip_path.write_bytes(zip_bytes({"options.json": b"{}", "weights.hdf5": b"x", "../evil.txt": b"!",
                                     "sub/../../../evil2.txt": b"!", str(outside): b"!"}))
    with pytest.raises(ModelFileError, match=r"evil.zip has members that would be written outside the folder "
                                             r"it is extracted to: '../evil.txt', 'sub/../../../evil2.txt', "
                                             f"'{outside}'. A model archive never needs them"):
        locate_model(zip_path, cache_dir=cache)
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert written == ["cache", "cache/extracted", "evil.zip"]


def test_a_zip_with_a_corrupt_member_names_the_file(tmp_path):
    data = bytearray(zip_bytes({"options.json": b"{}", "weights.hdf5": b"0123456789" * 10}))
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
    server.routes["/repository/222.zip"] = new = zip_bytes({"options.json": b"{}", "model.hdf5": b"z"})
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
    data = bytearray(zip_bytes({"options.json": b"{}", "weights.hdf5": b"0123456789" * 10}))
    data[data.index(b"0123456789") + 5] ^= 1
    server.routes["/bad.zip"] = bytes(data)
    cache = tmp_path / "cache"
    with pytest.raises(ModelFileError, match=r"bad.zip is not a readable zip archive \(Bad CRC-32.*The "
                                             r"download from http://127.0.0.1:\d+/bad.zip was not kept\.$"):
        locate_model(server.url("/bad.zip"), cache_dir=cache)
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_urls_are_told_from_paths(tmp_path):
    assert model_cache.is_url("HTTPS://host/x.zip") and not model_cache.is_url(str(tmp_path))
    assert is_url("file:///data/x.zip") and is_url("ftp://host/x.zip")
    assert not is_url("C:/models/x.zip") and not is_url("models/x.zip") and not is_url(tmp_path / "x.zip")


def test_the_cache_is_bilm_cache_else_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("BILM_CACHE", str(tmp_path / "cache"))
    assert default_cache_dir() == str(tmp_path / "cache")
    monkeypatch.delenv("BILM_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == os.path.join(str(tmp_path / "home"), ".cache", "bilm")


def test_sha256_is_64_hex_digits_in_lower_case():
    assert check_sha256(None) is None
    assert check_sha256("AB" * 32) == "ab" * 32
    for bad in ("ab" * 31, "g" * 64, 123):
        with pytest.raises(ValueError, match=r"sha256 must be 64 hexadecimal digits \(as sha256sum prints\)"):
            check_sha256(bad)


def test_a_file_url_is_downloaded_once_under_a_folder_of_its_own(tmp_path, monkeypatch):
    source = tmp_path / "published" / "222.zip"
    source.parent.mkdir()
    source.write_bytes(NLPL_ZIP)
    url = source.as_uri()
    calls = []
    urlopen = urllib.request.urlopen
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, *a, **k: (calls.append(url), urlopen(url, *a, **k))[1])
    path = download(url, tmp_path / "cache")
    assert calls == [url] and open(path, "rb").read() == NLPL_ZIP
    assert os.path.basename(path) == "222.zip"
    folder = os.path.dirname(path)
    assert os.path.dirname(folder) == str(tmp_path / "cache" / "downloads") and len(os.path.basename(folder)) == 16
    assert download(url, tmp_path / "cache", sha256=hashlib.sha256(NLPL_ZIP).hexdigest()) == path
    assert calls == [url]
    other = tmp_path / "published" / "other" / "222.zip"  # same name, another URL: another folder
    other.parent.mkdir()
    other.write_bytes(zip_bytes({"options.json": b"{}", "weights.hdf5": b"y"}))
    assert os.path.dirname(download(other.as_uri(), tmp_path / "cache")) != folder
