"""`load`: a published ELMo model in one call (`ELMo`, its vectors for your sentences: `bilm.elmo`)."""
from bilm.elmo import ELMo
from bilm.io.sources.model_files import locate_model
from bilm.models.embedding_settings import EmbeddingSettings

__all__ = ["ELMo", "load"]


def load(path, *, cache_dir=None, sha256=None, start=None, warm_up=None, kernel_dtype=None, mirror=None,
         matmul_dtype=None):
    """The ELMo model at `path`, ready to embed sentences.

    `path` (str or path-like) may be:
    - a directory holding an options file and its HDF5 weights (bilm's,
      AllenNLP's, the NLPL repository's layouts), or a model of another
      family, converted once into the cache: an ELMoForManyLangs folder or a
      TF1 Hub module of ELMo (see `bilm.io.sources.model_files`);
    - the options or weight file of one of several models in a directory;
    - a `.zip` or tar archive of such a directory, extracted once into the
      cache, or its `http(s)://` URL, downloaded once;
    - a published model's name, `<family>:<name>` (`allennlp:original-5.5b`,
      `nlpl:209`, `efml:fi`, ...), its files downloaded once into the cache;
      a local file or directory of that name is opened instead. The names
      are `bilm.io.sources.published_models.PUBLISHED_MODELS`, listed in
      docs/models.md; an AllenNLP name without its prefix (`small`) still
      works, with a `DeprecationWarning`. None stores a boundary state:
      give them `warm_up=` text.

    Args:
        path: see above.
        cache_dir: where downloads, extracted archives and converted models
            are kept; default `$BILM_CACHE`, else `~/.cache/bilm` (see
            `bilm.io.sources.model_cache`).
        sha256: the archive's expected SHA-256 (hex), checked on every load.
        start, warm_up, kernel_dtype: as `ELMo`'s (`warm_up`: your own
            text, for weights without a boundary state, as every published
            model's; see `bilm.models.embedding_settings`).
        mirror: for a published model's name, a URL or a local directory
            holding its files under the path of their official URLs
            (see `bilm.io.sources.published_models`); default `$BILM_MODEL_MIRROR`.
        matmul_dtype: deprecated, the old name of `kernel_dtype`.

    Returns:
        `ELMo`.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError (`ModelFileError`, `OptionsError`, `WeightFileError`):
            what is at `path` is not a model bilm reads, or is incomplete,
            contradictory or a variant bilm does not run; `path` is neither
            a path nor a published name; a download failed; an archive or
            HDF5 file is corrupt. The message names the file, URL or name.

    Example:
    ```python
    elmo = bilm.load("allennlp:original-5.5b", warm_up="my_corpus.txt")   # or a directory, a zip, its URL
    vectors = elmo.embed([["The", "cat", "sat"], ["Hi"]])  # [(3, 2P), (1, 2P)]
    ```
    """
    settings = EmbeddingSettings.of(start=start, warm_up=warm_up, kernel_dtype=kernel_dtype, matmul_dtype=matmul_dtype)
    return load_with_settings(path, settings, cache_dir=cache_dir, sha256=sha256, mirror=mirror)


def load_with_settings(path, settings, *, cache_dir=None, sha256=None, mirror=None):
    """`load` with its embedding settings made once, an `EmbeddingSettings` (the Beam handler's)."""
    files = locate_model(path, cache_dir=cache_dir, sha256=sha256, mirror=mirror)
    return ELMo.from_settings(files.options_file, files.weight_file, settings, metadata=files.metadata)


