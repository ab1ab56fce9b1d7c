"""What a training run is, resolved once at the edge: the model, the training settings, the origin, the data.

`train` (and `bin/train_elmo.py` through `train_from_files`) turn what the
caller gave (options or a size, flags, `init_from`, a restart's
checkpoint, the corpus) into one frozen `TrainingConfig`; the run below
takes that object and reads no dict, file or default again.
"""
import dataclasses
import glob
import os
import zlib

from bilm.options import BiLMOptions
from bilm.training.config.settings import TrainingSettings, training_settings
from bilm.training.data.shards import count_tokens, report_token_count


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """A training run, resolved.

    Attributes:
        options: the model's sections and every training key, as
            `save_dir/options.json` keeps them (`BiLMOptions`).
        settings: the training keys, checked and typed (`TrainingSettings`).
        origin: how the run begins (`bilm.training.run.run_origin`:
            `NewRun`, `Restart` or `Adaptation`).
        data_source: what describes the training stream (its file pattern,
            or the caller's `data_source`).
        data_fingerprints: the stream's fingerprints (`data_fingerprints`):
            each checkpoint records the first, and a restart continues the
            stream of a checkpoint that recorded any of them.
        vocabulary: the stream's `Vocabulary` (None: it has none), whose
            fingerprint each checkpoint records.
    """

    options: BiLMOptions
    settings: TrainingSettings
    origin: object
    data_source: str
    data_fingerprints: tuple
    vocabulary: object = None


def describe_data(data):
    """The stream's file pattern (`LMDataset`, `BidirectionalLMDataset`), else its type's name."""
    stream = _file_stream(data)
    return type(data).__name__ if stream is None else os.fspath(stream.filepattern)


def _file_stream(data):
    """The file-pattern stream `data` reads (itself, or a `BidirectionalLMDataset`'s forward one), else None."""
    for source in (data, getattr(data, "forward", None)):
        if isinstance(getattr(source, "filepattern", None), (str, os.PathLike)):
            return source
    return None


def data_fingerprint(description):
    """An int64 fingerprint of a data stream's description (a label, or what checkpoints before 2026-12-05
    recorded: the file pattern as given): a checkpoint records it, so that a restart knows whether its data is
    the same."""
    return zlib.crc32(str(description).encode("utf-8", "surrogateescape"))


def pattern_root(pattern):
    """The folder a glob `pattern` is written from: its leading components without a wildcard (a pattern with
    none names a file: its folder)."""
    parts = os.path.abspath(pattern).split(os.sep)
    fixed = 0
    while fixed < len(parts) and not glob.has_magic(parts[fixed]):
        fixed += 1
    return os.sep.join(parts[:min(fixed, len(parts) - 1)]) or os.sep


def data_fingerprints(data, data_source=None):
    """The int64 fingerprints that identify the stream `data` for a restart, the one a checkpoint records first.

    A caller's `data_source` is the stream's one identity. A file-pattern
    stream is its shards, in the order it reads them: each shard's path
    from the pattern's root folder (`pattern_root`) and its size in bytes.
    So the same corpus spelled another way (a relative or absolute pattern,
    another working directory) or copied to another machine's folder is
    the same data, and a shard added, removed or changed is new data. The
    pattern as given and as an absolute path, what earlier checkpoints
    recorded, are accepted after it.
    """
    if data_source is not None:
        return (data_fingerprint(os.fspath(data_source)),)
    pattern, stream = describe_data(data), _file_stream(data)
    shards = getattr(stream, "shards", None)
    if not shards:
        return (data_fingerprint(pattern),)
    root = pattern_root(pattern)
    listing = "\n".join(f"{os.path.relpath(os.path.abspath(path), root)}\t{os.path.getsize(path)}"
                         for path in shards)
    return tuple(dict.fromkeys(data_fingerprint(text) for text in (listing, pattern, os.path.abspath(pattern))))


def resolve_training_config(options, data, origin, *, vocabulary=None, data_source=None, n_train_tokens=None,
                            verbose=1):
    """The `TrainingConfig` of a run of `options` on `data` from `origin`; every check runs here, once.

    Args:
        options: the run's options, `origin.options(...)` of what the caller
            gave (`BiLMOptions`).
        data: the training stream; its file pattern names the data and is
            where the tokens are counted.
        origin: `NewRun`, `Restart` or `Adaptation` (`bilm.training.run.run_origin`).
        vocabulary: the training vocabulary (`data.vocab` by default): it
            gives `n_tokens_vocab` when the options leave it out, and a
            restart must use the vocabulary it was trained with.
        data_source: what identifies the data (default: its file pattern).
        n_train_tokens: given by the caller (a flag): never counted.
            Otherwise the tokens of the shards are counted when the options
            leave `n_train_tokens` out, or when a restart reads other data
            than its checkpoint did.

    Raises:
        OptionsError, CheckpointError (a restart with another vocabulary).
    """
    if vocabulary is None:
        vocabulary = getattr(data, "vocab", None)
    fingerprints = data_fingerprints(data, data_source)
    data_source = os.fspath(data_source) if data_source is not None else describe_data(data)
    keys = {}
    if vocabulary is not None:
        origin.check_vocabulary(options, vocabulary)
        if options.get("n_tokens_vocab") is None:
            keys["n_tokens_vocab"] = vocabulary.size
    if n_train_tokens is not None:
        keys["n_train_tokens"] = n_train_tokens
    elif options.get("n_train_tokens") is None or not origin.same_data(fingerprints):
        pattern = describe_data(data)
        if pattern != type(data).__name__:
            keys["n_train_tokens"] = report_token_count(count_tokens(pattern), pattern, verbose)
    options = options.updated(**keys) if keys else options
    options, settings = training_settings(options, need_schedule=True)
    return TrainingConfig(options, settings, origin, data_source, fingerprints, vocabulary)
