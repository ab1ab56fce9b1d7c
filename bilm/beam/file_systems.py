"""Files wherever Beam's file systems reach them: local paths, and the buckets of a cluster's workers.

A *bucket path* is one with a scheme that Beam's `FileSystems` reads and
bilm's downloads do not (`gs://`, `s3://`, `hdfs://`, `azfs://`, with the
matching extra of apache-beam installed); anything else is a local path
(or, for a model, what `bilm.load` takes). HDF5 files are written on local
disk and copied to a bucket whole, under a temporary name renamed when
complete; models and input shards are copied to local disk before use.
"""
import os
import shutil
import uuid

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from bilm.errors import UserError
from bilm.io.formats.embedding_files import read_root_attributes
from bilm.io.formats.output_files import atomic_output, check_output_directory
from bilm.io.sources.model_cache import download_path, is_url

_BLOCK_BYTES = 1 << 20


def is_bucket_path(path):
    """Whether `path` is read through Beam's file systems (see the module docstring)."""
    return not is_url(path) and FileSystems.get_scheme(os.fspath(path)) is not None


def join(directory, name):
    """`directory/name`, for a local directory or a bucket path."""
    return FileSystems.join(directory, name) if is_bucket_path(directory) else os.path.join(directory, name)


def split(path):
    """`(directory, name)` of a local or bucket path."""
    return FileSystems.split(path) if is_bucket_path(path) else os.path.split(path)


def match_files(pattern):
    """The files that `pattern` (a glob, local or in a bucket) names, sorted; a UserError if none."""
    try:
        found = FileSystems.match([os.fspath(pattern)])[0].metadata_list
    except Exception as error:  # Beam raises BeamIOError or ValueError, with the scheme's own reason
        raise UserError(f"Cannot list {pattern}: {error}") from None
    paths = sorted(metadata.path for metadata in found
                   if is_bucket_path(metadata.path) or os.path.isfile(metadata.path))
    if not paths:
        raise FileNotFoundError(f"No file matches {pattern} (expected text files, one sentence per line; quote "
                                "the pattern so that the shell leaves it to bilm).")
    return paths


def fetch(path, directory):
    """A local path of the file at `path`: itself when local, else a copy made in `directory`."""
    if not is_bucket_path(path):
        return path
    local = os.path.join(directory, split(path)[1])
    with _open(path) as source, open(local, "wb") as target:
        shutil.copyfileobj(source, target, _BLOCK_BYTES)
    return local


def fetch_model(path, cache_dir=None):
    """The local copy of the model zip at bucket path `path`, copied into bilm's model cache once per machine
    (where `bilm.io.sources.model_cache.download` keeps a URL's zip; `bilm.load` then extracts it once)."""
    target = download_path(path, cache_dir)
    if not os.path.isfile(target):
        check_output_directory(os.path.dirname(target))
        with atomic_output(target) as tmp, _open(path) as source, open(tmp, "wb") as out:
            shutil.copyfileobj(source, out, _BLOCK_BYTES)
    return target


def root_attributes(path):
    """The root attributes of the HDF5 file at `path` (local or bucket): None when there is no file, `{}` when
    what is there is not a readable HDF5 file."""
    if not FileSystems.exists(path):
        return None
    try:
        if not is_bucket_path(path):
            return read_root_attributes(path)
        with _open(path) as f:
            return read_root_attributes(f)
    except (OSError, ValueError):
        return {}


def publish(local_file, path):
    """Moves the finished `local_file` to `path` (local or bucket): written whole under a temporary name beside
    `path`, then renamed, so `path` is never seen incomplete."""
    if not is_bucket_path(path):
        os.replace(local_file, path)
        return
    directory, name = split(path)
    tmp = join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(local_file, "rb") as source, FileSystems.create(
                tmp, compression_type=CompressionTypes.UNCOMPRESSED) as target:
            shutil.copyfileobj(source, target, _BLOCK_BYTES)
        FileSystems.rename([tmp], [path])
    finally:
        if FileSystems.exists(tmp):
            FileSystems.delete([tmp])


def _open(path):
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
