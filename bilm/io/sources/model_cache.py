"""The model cache: each model URL downloaded once, each archive extracted once.

Layout of the cache directory (`$BILM_CACHE`, else `~/.cache/bilm`):

    downloads/<key of the URL>/<file name in the URL>    a downloaded archive
    downloads/<key of the URLs>/<file name in each URL>  a model published as
                                                         two files (options, weights)
    extracted/<archive name>-<key of the archive>/       an archive's members
    converted/<folder name>-<key of its files>/          another family's model in
                                                         bilm's files (`bilm.io.sources.converted_models`)

Archives are zips or tars (`.tar`, `.tar.gz`, `.tgz`, `.tar.bz2`,
`.tar.xz`). A URL's key is its SHA-256 (several URLs': that of the URLs,
one a line); an archive's key is the SHA-256 of its absolute path, size and
modification time, so an archive replaced by another file is extracted
again and an unchanged one never is (keys are cut to 16 hex digits). Every file and
folder is written under a temporary name beside its final one and renamed
when complete, so an interrupted download or extraction is never mistaken
for a finished one.

Downloads are read with `urllib` in blocks, hashed as they arrive and
checked against the Content-Length the server sent; progress goes to
stdout through `bilm.utils.progress.Progress`, a bar redrawn in place on a
terminal and a plain line now and then anywhere else (`keras.utils.get_file`
writes its animated bar, colour codes and backspaces included, into logs
and pipes). Archives are extracted here, not by `get_file`: it extracts
again on every call, writes straight to the final names, and skips members
that would land outside the target folder with a warning; here an archive
with such a member (`../x`, `/abs/x`), or a tar with anything but files and
folders (links, devices), is refused whole, before anything is written.
"""
import contextlib
import hashlib
import http.client
import json
import os
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import h5py

from bilm.errors import UserError
from bilm.io.formats.hashing import file_sha256
from bilm.io.formats.output_files import atomic_output, check_output_directory, temporary_path
from bilm.utils.progress import Progress

CACHE_ENVIRONMENT_VARIABLE = "BILM_CACHE"
URL_SCHEMES = ("http", "https", "ftp", "file")
_KEY_DIGITS = 16
_MIB = 1 << 20
# Seconds a connection may stay silent before a download fails.
_TIMEOUT_SECONDS = 60
# The first bytes of a zip archive (a local file header); its end record is at its end.
_ZIP_LOCAL_HEADER = b"PK\x03\x04"
ARCHIVE_EXTENSIONS = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


class ModelFileError(UserError):
    """A path or URL does not give a model bilm reads: no model files, another
    model family, a corrupt or unsafe archive, a failed download."""


def default_cache_dir():
    """`$BILM_CACHE` if set, else `~/.cache/bilm`."""
    return os.environ.get(CACHE_ENVIRONMENT_VARIABLE) or os.path.join(os.path.expanduser("~"), ".cache", "bilm")


def is_url(path):
    """Whether `path` is a URL bilm downloads (`URL_SCHEMES`), not a local path."""
    return isinstance(path, str) and urllib.parse.urlsplit(path).scheme.lower() in URL_SCHEMES


def check_sha256(sha256):
    """`sha256` lower-cased, or None; ValueError unless it is 64 hex digits."""
    if sha256 is None:
        return None
    if not isinstance(sha256, str) or len(sha256) != 64 or any(c not in "0123456789abcdefABCDEF" for c in sha256):
        raise UserError(f"sha256 must be 64 hexadecimal digits (as sha256sum prints). Received: sha256={sha256!r}")
    return sha256.lower()


def download(url, cache_dir=None, sha256=None):
    """The local copy of the archive at `url`, downloaded into the cache once.

    Args:
        url: an `http(s)://`, `ftp://` or `file://` URL of a zip or tar archive.
        cache_dir: the cache directory (default `default_cache_dir()`).
        sha256: expected SHA-256 (hex) of the file; a cached copy is checked
            against it and downloaded again if it differs.

    Returns:
        path of the downloaded file in the cache.

    Raises:
        ModelFileError: the download failed (naming the URL and the HTTP
            status), the file differs from `sha256`, or it is not an
            archive (a truncated zip is called so). Nothing is left in the
            cache then.
    """
    sha256 = check_sha256(sha256)
    target = download_path(url, cache_dir)
    _download_once(url, target, sha256, _check_archive)
    return target


def download_path(url, cache_dir=None):
    """Where the cache keeps the file at `url` (`downloads/<key of the URL>/<file name in the URL>`)."""
    return os.path.join(cache_path(cache_dir), "downloads", cache_key(url), _file_name(url))


def download_model_files(urls, cache_dir=None, sha256=None):
    """The local copies of one model's files (an options file and its weights), downloaded into one folder once.

    Args:
        urls: the files' URLs (`http(s)://`, `ftp://`, `file://`), each with
            its own file name ending `.json` (the file must hold a JSON
            object), `.hdf5` or `.h5` (HDF5) or `.zip` (a whole zip).
        cache_dir: the cache directory (default `default_cache_dir()`).
        sha256: `{url: expected SHA-256 (hex)}` for the files whose hash is
            known (a cached copy that differs is downloaded again), or None.

    Returns:
        the paths, in the order of `urls`:
        `downloads/<key of all the URLs>/<file name in each URL>`.

    Raises:
        ModelFileError: a download failed, differs from its SHA-256, or is
            not what its name says; that file is not kept (the others are).
    """
    sha256 = {url: check_sha256(value) for url, value in (sha256 or {}).items()}
    names = [_file_name(url) for url in urls]
    if len(set(names)) != len(names) or any(os.path.splitext(name)[1] not in _CONTENT_CHECKS for name in names):
        raise UserError(f"The files of one model need distinct names ending {', '.join(_CONTENT_CHECKS)}; "
                         f"received the URLs {list(urls)}.")
    folder = os.path.join(cache_path(cache_dir), "downloads", cache_key("\n".join(urls)))
    paths = [os.path.join(folder, name) for name in names]
    for url, path in zip(urls, paths):
        _download_once(url, path, sha256.get(url), _CONTENT_CHECKS[os.path.splitext(path)[1]])
    return paths


def _download_once(url, target, sha256, check):
    """Downloads `url` to `target` unless a copy (matching `sha256` if given) is
    there; `check(url, path)` raises if the bytes are not what `target` should hold."""
    if os.path.isfile(target) and (sha256 is None or file_sha256(target) == sha256):
        return
    check_output_directory(os.path.dirname(target))
    with atomic_output(target) as tmp:
        _fetch(url, tmp, sha256)
        check(url, tmp)


def _file_name(url):
    return os.path.basename(urllib.parse.urlsplit(url).path) or "download"


def _fetch(url, path, sha256=None):
    """Writes the bytes at `url` to `path`, with a progress display on stdout.

    Raises:
        ModelFileError: the URL cannot be opened (its HTTP status or the
            reason), the connection failed or ended before the
            Content-Length the server sent, or the bytes differ from
            `sha256`. `path` is then incomplete; the caller removes it.
    """
    print(f"Downloading data from {url}", flush=True)
    try:
        response = urllib.request.urlopen(url, timeout=_TIMEOUT_SECONDS)
    except urllib.error.HTTPError as error:
        raise ModelFileError(f"Cannot download {url}: HTTP {error.code} {error.reason}.") from None
    except urllib.error.URLError as error:
        raise ModelFileError(f"Cannot download {url}: {error.reason}.") from None
    except (OSError, ValueError, http.client.HTTPException) as error:  # timeouts, malformed URLs or replies
        raise ModelFileError(f"Cannot download {url}: {error}.") from None
    digest, received = hashlib.sha256(), 0
    with response, open(path, "wb") as f:
        expected = _content_length(response)
        progress = Progress(-(-expected // _MIB), unit="MiB") if expected else None
        while True:
            try:
                block = response.read(_MIB)
            except (OSError, http.client.HTTPException) as error:
                raise ModelFileError(
                    f"Cannot download {url}: the connection failed after {received:,} bytes ({error}); the partial "
                    "file was not kept. Try again.") from None
            if not block:
                break
            f.write(block)
            digest.update(block)
            received += len(block)
            if progress is not None and received >= _MIB:
                progress.update(received // _MIB)
        if progress is not None:
            if received >= expected:
                progress.update(progress.total)
            progress.close()
    if expected is not None and received < expected:
        raise ModelFileError(
            f"Cannot download {url}: the connection ended after {received:,} of the {expected:,} bytes the server "
            "announced (Content-Length); the partial file was not kept. Try again.")
    if sha256 is not None and digest.hexdigest() != sha256:
        raise ModelFileError(
            f"The file downloaded from {url} has SHA-256 {digest.hexdigest()}, not the expected "
            f"sha256={sha256!r}; it was not kept. Check the hash, or the URL.")


def _content_length(response):
    """The Content-Length of `response` as an int, or None when absent or malformed."""
    try:
        return int(response.headers["Content-Length"])
    except (KeyError, TypeError, ValueError):
        return None


def is_archive(path):
    """Whether the file at `path` is a zip or a tar archive (compressed or not)."""
    return zipfile.is_zipfile(path) or tarfile.is_tarfile(path)


def _check_archive(url, path):
    """Raises a ModelFileError unless `path`, downloaded from `url`, is a whole zip archive or a tar archive."""
    if zipfile.is_zipfile(path) or (not _file_name(url).endswith(".zip") and tarfile.is_tarfile(path)):
        return
    with open(path, "rb") as f:
        is_truncated = f.read(len(_ZIP_LOCAL_HEADER)) == _ZIP_LOCAL_HEADER
    if is_truncated:
        raise ModelFileError(
            f"{url} gave a truncated or corrupt zip archive ({os.path.getsize(path):,} bytes: it starts as a zip "
            "but has no end record); it was not kept. Download it again, or check the copy at that address.")
    kind = "zip" if _file_name(url).endswith(".zip") else "zip or tar"
    raise ModelFileError(
        f"{url} gave a file that is not a {kind} archive ({_describe_bytes(path)}). bilm.load downloads an archive "
        "(.zip, .tar.gz, ...) holding a model's files.")


def _check_json(url, path):
    """Raises a ModelFileError unless `path`, downloaded from `url`, holds a JSON object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict):
        raise ModelFileError(f"{url} gave a file that is not a JSON object ({_describe_bytes(path)}); it was not kept.")


def _check_hdf5(url, path):
    """Raises a ModelFileError unless `path`, downloaded from `url`, starts as an HDF5 file."""
    if not h5py.is_hdf5(path):
        raise ModelFileError(f"{url} gave a file that is not HDF5 ({_describe_bytes(path)}); it was not kept.")


def _describe_bytes(path):
    with open(path, "rb") as f:
        head = f.read(40)
    return f"{os.path.getsize(path):,} bytes starting {head!r}"


# What a downloaded file must be, by its name's extension.
_CONTENT_CHECKS = {".zip": _check_archive, ".json": _check_json, ".hdf5": _check_hdf5, ".h5": _check_hdf5}


def extract_archive(archive_path, cache_dir=None):
    """The folder of the cache holding the members of the zip or tar archive at `archive_path`, extracted once.

    Args:
        archive_path: a local zip or tar archive (`ARCHIVE_EXTENSIONS`).
        cache_dir: the cache directory (default `default_cache_dir()`).

    Returns:
        path of the folder (see the module docstring for its name).

    Raises:
        ModelFileError: the archive is corrupt, or has a member that would
            be written outside the folder or (in a tar) is neither a file
            nor a folder; nothing is extracted then.
    """
    archive_path = os.path.realpath(os.fspath(archive_path))
    stat = os.stat(archive_path)
    name = os.path.basename(archive_path)
    stem = next((name[:-len(ext)] for ext in ARCHIVE_EXTENSIONS if name.endswith(ext) and len(name) > len(ext)),
                os.path.splitext(name)[0])
    target = os.path.join(cache_path(cache_dir), "extracted",
                          f"{stem}-{cache_key(f'{archive_path}|{stat.st_size}|{stat.st_mtime_ns}')}")
    if os.path.isdir(target):
        return target
    kind = "zip" if zipfile.is_zipfile(archive_path) else "tar"
    with folder_written_once(target) as tmp:
        try:
            if kind == "zip":
                with zipfile.ZipFile(archive_path) as archive:
                    _refuse_unsafe(archive_path, [info.filename for info in archive.infolist()
                                                  if _escapes(info.filename, tmp)], [])
                    archive.extractall(tmp)
            else:
                with tarfile.open(archive_path) as archive:
                    members = archive.getmembers()
                    _refuse_unsafe(archive_path, [m.name for m in members if _escapes(m.name, tmp)],
                                   [m.name for m in members if not (m.isfile() or m.isdir())])
                    archive.extractall(tmp, members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as error:
            raise ModelFileError(f"{archive_path} is not a readable {kind} archive ({error}); it may be truncated or "
                                 "corrupt. Download it again.") from None
    return target


@contextlib.contextmanager
def folder_written_once(target):
    """Yields a new temporary folder beside `target` to fill; when the block completes it becomes `target`
    (unless another process made `target` meanwhile, whose folder is kept), otherwise it is removed."""
    check_output_directory(os.path.dirname(target))
    tmp = temporary_path(target)
    os.mkdir(tmp)
    try:
        yield tmp
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.isdir(target):
                raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)


def read_json_object(path):
    """The JSON object in the file at `path`; a ModelFileError naming it if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelFileError(f"{path} is not valid JSON ({error}); the model's files may be corrupt.") from None
    if not isinstance(value, dict):
        raise ModelFileError(f"{path} must hold a JSON object. Received a {type(value).__name__}.")
    return value


def _refuse_unsafe(archive_path, escaping, special):
    """Raises a ModelFileError naming the members that would land outside the folder, or that are links or
    devices."""
    for names, what in ((escaping, "that would be written outside the folder it is extracted to"),
                        (special, "that are links or devices, not files or folders")):
        if names:
            raise ModelFileError(
                f"{archive_path} has members {what}: {', '.join(repr(name) for name in names[:10])}. A model "
                "archive never needs them, so nothing was extracted; rebuild it with relative paths and plain "
                "files.")


def _escapes(name, directory):
    """Whether zip member `name` would land outside `directory` (absolute, `..`, a drive)."""
    directory = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(directory, name))
    return os.path.isabs(name) or os.path.commonpath([path, directory]) != directory


def cache_path(cache_dir=None):
    """The absolute path of the cache directory `cache_dir` (None: `default_cache_dir()`)."""
    return os.path.abspath(os.path.expanduser(os.fspath(cache_dir or default_cache_dir())))


def cache_key(text):
    """A cache folder's key for `text` (a URL, or what identifies the files behind it): 16 hex digits."""
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:_KEY_DIGITS]
