"""Models of other families, converted once into bilm's own files in the cache.

ELMoForManyLangs' folders (`bilm.io.sources.elmoformanylangs`) and TF1 Hub modules
(`bilm.io.sources.tf_hub_modules`) are read, checked and converted by their
family's reader into bilm's options and HDF5 weights, written to

    <cache>/converted/<folder name>-<key>/options.json
    <cache>/converted/<folder name>-<key>/weights.hdf5

where the key is the SHA-256 of the family, `CONVERSION_VERSION`, the
folder's absolute path and every file's path, size and modification time:
an unchanged folder is converted once, a changed one again. The files are
written to a temporary folder beside the final one and renamed when
complete, so an interrupted conversion is never mistaken for a finished
one. Every later load reads these files as any bilm model.
"""
import dataclasses
import json
import os
from typing import Callable, Optional, Tuple

from bilm.io.formats.weight_file import WEIGHTS_KIND, write_datasets
from bilm.io.sources.model_cache import cache_key, cache_path, folder_written_once

# Raised when a conversion changes, so that older converted copies are not reused.
CONVERSION_VERSION = 1
OPTIONS_FILE = "options.json"
WEIGHT_FILE = "weights.hdf5"


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """A family of models bilm converts.

    Attributes:
        name: what it is called in messages and in the cache key.
        markers: file names whose presence in a folder marks the family.
        read: folder -> `(options dict, {HDF5 dataset name: array})`,
            raising a `bilm.errors.UserError` naming the file at fault.
        recognizes: folder holding a marker -> whether it is this family's
            model (None: always).
    """

    name: str
    markers: Tuple[str, ...]
    read: Callable
    recognizes: Optional[Callable] = None

    def holds(self, directory, names):
        """Whether the folder `directory`, holding the files `names`, holds a model of this family."""
        return bool(set(self.markers) & set(names)) and (self.recognizes is None or self.recognizes(directory))


def convert_once(directory, family, cache_dir=None):
    """The options and weight files of the `family` model in `directory`, converted on the first call.

    Args:
        directory: the model's folder.
        family: a `ModelFamily`.
        cache_dir: the cache directory (default `$BILM_CACHE`, else `~/.cache/bilm`).

    Returns:
        `(options file, weight file)` in the cache.
    """
    directory = os.path.realpath(os.fspath(directory))
    target = os.path.join(cache_path(cache_dir), "converted",
                          f"{os.path.basename(directory)}-{cache_key(_identity(directory, family))}")
    files = os.path.join(target, OPTIONS_FILE), os.path.join(target, WEIGHT_FILE)
    if os.path.isdir(target):
        return files
    options, arrays = family.read(directory)
    with folder_written_once(target) as tmp:
        with open(os.path.join(tmp, OPTIONS_FILE), "w", encoding="utf-8") as f:
            json.dump(options, f, ensure_ascii=False)
        write_datasets(os.path.join(tmp, WEIGHT_FILE), arrays, kind=WEIGHTS_KIND)
    return files


def _identity(directory, family):
    """What the converted copy depends on: the family, the conversion, and every file of the folder."""
    lines = [family.name, str(CONVERSION_VERSION), directory]
    for root, folders, names in os.walk(directory):
        folders.sort()
        for name in sorted(names):
            stat = os.stat(os.path.join(root, name))
            lines.append(f"{os.path.relpath(os.path.join(root, name), directory)}|{stat.st_size}|{stat.st_mtime_ns}")
    return "\n".join(lines)
