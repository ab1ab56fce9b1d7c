"""Where a published model's files are: a directory, a zip or a URL to its options and weights.

A model is an options file (JSON) and an HDF5 weight file in one directory,
under any of the names the publishers use (`MODEL_FILE_PAIRS`):
- bilm's own `options.json` + `weights.hdf5`, and what `dump_weights`
  writes, `<name>.hdf5` + `<name>_options.json`;
- the NLPL repository's `options.json` + `model.hdf5`, with an optional
  `vocab.txt` / `vocab.txt.gz` (a token list; character ids never need it)
  and `meta.json` (what the model was trained on, kept as `metadata`);
- AllenNLP's `<name>_options.json` + `<name>_weights.hdf5`.
The pair may also sit inside the one folder of the directory (an archive
whose files are in one top folder). Archives (zip, tar), URLs and published
models' names (`bilm.io.sources.published_models`) are turned into such files in
the cache by `bilm.io.sources.model_cache`. Models of the other families bilm reads
(`CONVERTED_FAMILIES`: ELMoForManyLangs' folders, TF1 Hub modules of ELMo)
are converted once into such a pair in the cache
(`bilm.io.sources.converted_models`). Other layouts get an error saying what they
are (another SavedModel; a training checkpoint directory, with how to write
its weights with `dump_weights` first), and models in several folders one
naming them.
"""
import dataclasses
import os
from typing import Optional

from bilm.errors import UserError
from bilm.io.formats.hashing import file_sha256
from bilm.io.formats.output_files import same_file
from bilm.io.sources import elmoformanylangs, tf_hub_modules
from bilm.io.sources.converted_models import ModelFamily, convert_once
from bilm.io.sources.model_cache import (
    ModelFileError,
    check_sha256,
    download,
    download_model_files,
    extract_archive,
    is_archive,
    is_url,
    read_json_object,
)
from bilm.io.sources.published_models import find_published_model, may_be_model_name, model_mirror

# (options file, weight file) names recognised in one directory; `*` is any
# name, the same in both.
MODEL_FILE_PAIRS = (
    ("options.json", "weights.hdf5"),  # bilm
    ("options.json", "model.hdf5"),  # NLPL repository
    ("*_options.json", "*_weights.hdf5"),  # AllenNLP
    ("*_options.json", "*.hdf5"),  # dump_weights
)
VOCAB_FILES = ("vocab.txt", "vocab.txt.gz")
METADATA_FILE = "meta.json"

# The other families bilm reads, converted once into bilm's files; a folder
# holding any of a family's markers is that family's (a TF-Hub module only
# when its variables are those of ELMo).
CONVERTED_FAMILIES = (
    ModelFamily("ELMoForManyLangs", elmoformanylangs.MARKERS, elmoformanylangs.read_elmoformanylangs),
    ModelFamily("TF-Hub module", tf_hub_modules.MARKERS, tf_hub_modules.read_tf_hub_module,
                tf_hub_modules.is_elmo_module),
)
# Files that mark a layout bilm.load does not read: (names, the message), the
# message formatted with `where` (what was asked for), `directory`, `found`
# (the marker names present) and `weight_file` (where to write the weights).
FOREIGN_LAYOUTS = (
    (("saved_model.pb", "tfhub_module.pb"),
     ("{where} holds a TF-Hub module or SavedModel other than a TF1 Hub module of ELMo (whose variables bilm "
      "reads), not an options file with HDF5 weights. Load it with tf.saved_model.load({directory!r}) (or "
      "hub.load); found {found}.")),
    (("checkpoint.npz", "jax_checkpoint.npz", "checkpoint"),
     ("{where} is a training checkpoint directory ({found}), without the HDF5 weights "
      "bilm.load reads. Write them first: python bin/dump_weights.py --save_dir {directory} --outfile "
      "{weight_file}, then load that directory.")),
)
# Folders that archivers add beside the content.
_IGNORED_FOLDERS = ("__MACOSX",)


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """The files of one model in a local directory.

    Attributes:
        options_file, weight_file: the model (paths).
        vocab_file: `vocab.txt` / `vocab.txt.gz` beside them, or None.
        metadata: the parsed `meta.json` beside them (a dict), or None.
        source: what was asked for (the directory, zip, URL or file).
    """

    options_file: str
    weight_file: str
    vocab_file: Optional[str] = None
    metadata: Optional[dict] = None
    source: Optional[str] = None

    @property
    def directory(self):
        return os.path.dirname(self.options_file)


def options_file_beside(weight_file):
    """Where the options of a weight file bilm writes go: `<stem>_options.json`
    for `<stem>.hdf5`, a pair `find_model_files` recognises."""
    weight_file = os.fspath(weight_file)
    stem = weight_file[:-len(".hdf5")] if weight_file.endswith(".hdf5") else weight_file
    return f"{stem}_options.json"


def locate_model(path, cache_dir=None, sha256=None, mirror=None):
    """The local files of the model at `path`, downloading and extracting it if needed.

    Args:
        path: a directory holding the model (see the module docstring), a
            zip or tar archive of one, an `http(s)://` / `ftp://` / `file://`
            URL of an archive, the model's options or weight file (to pick
            one of several models in a directory), or a published model's
            name (`bilm.io.sources.published_models`; a local path of that name
            wins).
        cache_dir: where downloads, extracted archives and converted models
            are kept (default `$BILM_CACHE`, else `~/.cache/bilm`). Each URL
            is downloaded once, each archive extracted once and each model
            of another family converted once.
        sha256: the expected SHA-256 (hex) of the archive, downloaded or
            local; checked on every call (a cached download that differs is
            downloaded again).
        mirror: for a published model's name, where to fetch its files
            instead of the publisher (a URL or a directory, see
            `bilm.io.sources.published_models`); default `$BILM_MODEL_MIRROR`.

    Returns:
        `ModelFiles`.

    Raises:
        FileNotFoundError: `path` does not exist.
        ModelFileError (a ValueError): no model bilm reads is there, an
            archive is corrupt or unsafe, a download failed or differs from
            `sha256`, another family's model is incomplete, contradicts
            itself or is a variant bilm does not run (naming the file), or
            `path` is neither a path nor a published name.
    """
    sha256 = check_sha256(sha256)
    if not is_url(path) and not os.path.exists(os.fspath(path)) and may_be_model_name(path):
        return _locate_published_model(find_published_model(path), cache_dir, sha256, model_mirror(mirror))
    if mirror is not None:
        raise UserError(f"mirror= applies to published model names; {path!r} is a path or URL. Leave mirror out.")
    if is_url(path):
        return find_model_files(_extract_download(path, cache_dir, sha256), source=path, cache_dir=cache_dir)
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"No model at {path}: no such file or directory. bilm.load takes a model directory, a .zip of "
            "one, the URL of a .zip, or a published model's name.")
    archive = os.path.isfile(path) and is_archive(path)
    if sha256 is not None and not archive:
        raise UserError(f"sha256= checks a zip or a download; {path} is not a zip. Leave sha256 out.")
    if os.path.isdir(path):
        return find_model_files(path, cache_dir=cache_dir)
    if archive:
        actual = file_sha256(path) if sha256 is not None else None
        if actual != sha256:
            raise ModelFileError(f"{path} has SHA-256 {actual}, not the expected sha256={sha256!r}: it is "
                                 "another file than the one meant, or it is corrupt.")
        return find_model_files(extract_archive(path, cache_dir), source=path, cache_dir=cache_dir)
    directory = os.path.dirname(os.path.abspath(path))
    if path.endswith(".json"):
        return find_model_files(directory, options_file=path)
    if path.endswith((".hdf5", ".h5")):
        return find_model_files(directory, weight_file=path)
    raise ModelFileError(_describe_other_file(path))


def _locate_published_model(model, cache_dir, sha256, mirror):
    """The local files of `model` (a `PublishedModel`), fetched from `mirror` if not None."""
    urls = model.file_urls(mirror)
    if model.is_zip:
        expected = sha256 or model.sha256.get(model.urls[0])
        return find_model_files(_extract_download(urls[0], cache_dir, expected), source=model.name,
                                cache_dir=cache_dir)
    if sha256 is not None:
        raise UserError(f"sha256= checks a zip; {model.name} is two files (options and weights). Leave sha256 "
                         "out.")
    known = {url: model.sha256[official] for url, official in zip(urls, model.urls) if official in model.sha256}
    options_file, weight_file = download_model_files(urls, cache_dir, known)
    return ModelFiles(options_file, weight_file, source=model.name)


def _extract_download(url, cache_dir, sha256):
    """The cache folder of the archive at `url`; a download that does not extract is removed from the cache."""
    archive_path = download(url, cache_dir, sha256)
    try:
        return extract_archive(archive_path, cache_dir)
    except ModelFileError as error:
        os.remove(archive_path)
        raise ModelFileError(f"{error} The download from {url} was not kept.") from None


def find_model_files(directory, options_file=None, weight_file=None, source=None, cache_dir=None):
    """The one model in `directory`, or in its only folder.

    Args:
        directory: a local directory.
        options_file, weight_file: keep only the pairs with this file.
        source: what the directory came from (an archive, a URL), for messages.
        cache_dir: where a model of another family is converted (see
            `locate_model`).

    Returns:
        `ModelFiles`.

    Raises:
        ModelFileError: no pair, several pairs, a model of another family
            that cannot be converted, or a layout bilm does not read; the
            message lists the files found and the names expected.
    """
    directory = os.fspath(directory)
    return _find(directory, options_file, weight_file, source or directory,
                 descend=options_file is None and weight_file is None, cache_dir=cache_dir)


def _find(directory, options_file, weight_file, source, descend, cache_dir=None):
    names = _visible_names(directory)
    pairs = _pairs(directory, names, options_file, weight_file)
    if len(pairs) == 1:
        found_options, found_weights = pairs[0]
        return ModelFiles(found_options, found_weights, vocab_file=_vocab_file(directory),
                          metadata=_read_metadata(directory), source=source)
    where = source if source == directory else f"{source} ({directory})"
    if pairs:
        raise ModelFileError(
            f"{where} holds {len(pairs)} models ({_describe_pairs(pairs)}). Pass the options file of the one you want, "
            f"e.g. bilm.load({pairs[0][0]!r}).")
    family = _converted_family(directory, names)
    if family is not None and options_file is None and weight_file is None:
        converted_options, converted_weights = convert_once(directory, family, cache_dir)
        return ModelFiles(converted_options, converted_weights, metadata=_read_metadata(directory), source=source)
    _check_foreign_layout(directory, names, where)
    folders = [name for name in names if os.path.isdir(os.path.join(directory, name))]
    if options_file is None and weight_file is None:
        _check_models_in_folders(directory, folders, where)
    found = _listing(directory, names)
    if descend and len(folders) == 1:
        inner = os.path.join(directory, folders[0])
        inner_names = _visible_names(inner)
        inner_folders = [name for name in inner_names if os.path.isdir(os.path.join(inner, name))]
        markers = {marker for marker_names, _ in FOREIGN_LAYOUTS for marker in marker_names}
        markers.update(marker for family in CONVERTED_FAMILIES for marker in family.markers)
        if (_pairs(inner, inner_names, None, None) or markers & set(inner_names)
                or len(_models_in_folders(inner, inner_folders)) > 1):
            return _find(inner, None, None, source, descend=False, cache_dir=cache_dir)
        if len(names) == 1:
            found += f" ({folders[0]}/ holds {_listing(inner, inner_names)})"
    chosen = options_file if options_file is not None else weight_file
    wanted = f" for {os.path.basename(chosen)}" if chosen is not None else ""
    raise ModelFileError(
        f"{where} holds no model bilm reads{wanted}: found {found}. Expected an "
        "options file with its HDF5 weights in one directory: " + ", ".join(
            f"{o} + {w}" for o, w in MODEL_FILE_PAIRS) + " (`*` the same name in both).")


def _converted_family(directory, names):
    """The `CONVERTED_FAMILIES` member whose markers are among `names`, or None."""
    return next((family for family in CONVERTED_FAMILIES if family.holds(directory, names)), None)


def _check_foreign_layout(directory, names, where):
    """Raises the `FOREIGN_LAYOUTS` message of the first layout whose marker files are among `names`."""
    for markers, message in FOREIGN_LAYOUTS:
        found = [name for name in markers if name in names]
        if found:
            raise ModelFileError(message.format(where=where, directory=directory, found=", ".join(found),
                                                weight_file=os.path.join(directory, "weights.hdf5")))


def _models_in_folders(directory, folders):
    """`[(folder, pairs)]` for each of `folders` (names in `directory`) holding model files."""
    found = []
    for folder in folders:
        path = os.path.join(directory, folder)
        pairs = _pairs(path, _visible_names(path), None, None)
        if pairs:
            found.append((folder, pairs))
    return found


def _check_models_in_folders(directory, folders, where):
    """Raises a ModelFileError naming the models when several of `folders` hold one."""
    models = _models_in_folders(directory, folders)
    if len(models) < 2:
        return
    shown = ", ".join(f"{folder}/ ({_describe_pairs(pairs)})" for folder, pairs in models)
    raise ModelFileError(
        f"{where} holds several models, one in each of these folders: {shown}. Pass the folder of the one "
        f"you want, e.g. bilm.load({os.path.join(directory, models[0][0])!r}).")


def _describe_pairs(pairs):
    return "; ".join(f"{os.path.basename(o)} + {os.path.basename(w)}" for o, w in pairs)


def _pairs(directory, names, options_file, weight_file):
    """Every (options path, weight path) in `directory` named as in
    `MODEL_FILE_PAIRS`; where several options files name one weight file,
    the one named after it (written with it by `dump_weights`) wins."""
    files = {name for name in names if os.path.isfile(os.path.join(directory, name))}
    found = []
    for options_pattern, weights_pattern in MODEL_FILE_PAIRS:
        for options_name in sorted(files):
            stem = _match(options_pattern, options_name)
            if stem is None:
                continue
            weights_name = weights_pattern.replace("*", stem)
            if weights_name in files and (options_name, weights_name) not in found:
                found.append((options_name, weights_name))
    by_weights = {}
    for options_name, weights_name in found:
        named_after = options_name == weights_name[:-len(".hdf5")] + "_options.json"
        if weights_name not in by_weights or named_after:
            by_weights[weights_name] = options_name
    pairs = [(os.path.join(directory, o), os.path.join(directory, w)) for w, o in by_weights.items()]
    if options_file is not None:
        pairs = [pair for pair in pairs if same_file(pair[0], options_file)]
    if weight_file is not None:
        pairs = [pair for pair in pairs if same_file(pair[1], weight_file)]
    return pairs


def _match(pattern, name):
    """The `*` part of `name` for `pattern`, "" for a pattern without `*`, or None."""
    if "*" not in pattern:
        return "" if name == pattern else None
    prefix, suffix = pattern.split("*")
    if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix):
        return name[len(prefix):len(name) - len(suffix)]
    return None


def _visible_names(directory):
    return sorted(name for name in os.listdir(directory)
                  if not name.startswith(".") and name not in _IGNORED_FOLDERS)


def _vocab_file(directory):
    for name in VOCAB_FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return None


def _read_metadata(directory):
    path = os.path.join(directory, METADATA_FILE)
    return read_json_object(path) if os.path.isfile(path) else None


def _listing(directory, names, limit=20):
    shown = [name + ("/" if os.path.isdir(os.path.join(directory, name)) else "") for name in names[:limit]]
    if len(names) > limit:
        shown.append(f"... {len(names) - limit} more")
    return ", ".join(shown) if shown else "nothing"


def _describe_other_file(path):
    if path.endswith(".zip"):
        return f"{path} is not a readable zip archive (truncated or corrupt?); download it again."
    return (f"{path} is neither a model directory, a .zip or tar archive, nor a model's options (.json) or weight "
            "(.hdf5) file. bilm.load takes a directory holding options.json and an HDF5 weight file (or an "
            "ELMoForManyLangs model, a TF-Hub module of ELMo), an archive of one, or the URL of an archive.")

