"""What a training run is, resolved once at the edge: the model, the training settings, the origin, the data.

`train` (and `bin/train_elmo.py` through `train_from_files`) turn what the
caller gave (options or a size, flags, `init_from`, a restart's
checkpoint, the corpus) into one frozen `TrainingConfig`; the run below
takes that object and reads no dict, file or default again.
"""
import dataclasses
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
        data_source: what identifies the training stream (its file
            pattern), for a restart to know whether the data is the same.
        vocabulary: the stream's `Vocabulary` (None: it has none), whose
            fingerprint each checkpoint records.
    """

    options: BiLMOptions
    settings: TrainingSettings
    origin: object
    data_source: str
    vocabulary: object = None


def describe_data(data):
    """The stream's file pattern (`LMDataset`, `BidirectionalLMDataset`), else its type's name."""
    for source in (data, getattr(data, "forward", None)):
        pattern = getattr(source, "filepattern", None)
        if isinstance(pattern, (str, os.PathLike)):
            return os.fspath(pattern)
    return type(data).__name__


def data_fingerprint(description):
    """An int64 fingerprint of a data stream's description (e.g. its file pattern): a checkpoint records it, so
    that a restart knows whether its data is the same."""
    return zlib.crc32(str(description).encode("utf-8"))


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
    data_source = os.fspath(data_source) if data_source is not None else describe_data(data)
    keys = {}
    if vocabulary is not None:
        origin.check_vocabulary(options, vocabulary)
        if options.get("n_tokens_vocab") is None:
            keys["n_tokens_vocab"] = vocabulary.size
    if n_train_tokens is not None:
        keys["n_train_tokens"] = n_train_tokens
    elif options.get("n_train_tokens") is None or not origin.same_data(data_source):
        pattern = describe_data(data)
        if pattern != type(data).__name__:
            keys["n_train_tokens"] = report_token_count(count_tokens(pattern), pattern, verbose)
    options = options.updated(**keys) if keys else options
    options, settings = training_settings(options, need_schedule=True)
    return TrainingConfig(options, settings, origin, data_source, vocabulary)
