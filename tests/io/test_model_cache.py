"""The model cache: zips extracted once and safely, URLs downloaded once, failures that leave nothing.

Most tests go through `locate_model`, the way bilm reaches the cache.
Nothing here touches the internet: URLs are served by an `http.server` on
127.0.0.1 in a thread of the test, which counts the requests it answers,
or are `file://` URLs.
"""
import hashlib
import http.server
import os
import threading
import zipfile

import keras
import pytest

from bilm.io import model_cache
from bilm.io.model_cache import ModelFileError, check_sha256, default_cache_dir, download, is_url
from bilm.io.model_files import locate_model
from helpers import NLPL_ZIP, zip_bytes


class _Server:
    """Serves `routes` ({path: bytes}) on 127.0.0.1; `requests` lists the paths asked for."""

    def __init__(self):
        self.routes, self.requests = {}, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                if self.path == "/short.zip":  # promises more bytes than it sends, then hangs up
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    self.wfile.write(NLPL_ZIP[:50])
                    return
                if self.path not in server.routes:
                    self.send_error(404, "Not Found")
                    return
                body = server.routes[self.path]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = _Server()
    yield server
    server.close()


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


def test_a_failed_download_names_the_url_and_keeps_nothing(tmp_path, server):
    cache = tmp_path / "cache"
    server.routes["/model.zip"] = NLPL_ZIP
    server.routes["/page.zip"] = b"<html><body>Please log in</body></html>"
    with pytest.raises(ModelFileError, match=r"Cannot download http://127.0.0.1:\d+/missing.zip: HTTP 404 Not Found"):
        locate_model(server.url("/missing.zip"), cache_dir=cache)
    with pytest.raises(ModelFileError, match=r"Cannot download .*/short.zip: retrieval incomplete: got only 50 "
                                             "out of 100000 bytes"):
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
    get_file = keras.utils.get_file
    monkeypatch.setattr(keras.utils, "get_file", lambda *a, **k: (calls.append(k["origin"]), get_file(*a, **k))[1])
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
