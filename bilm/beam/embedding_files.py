"""`EmbedFiles`: one HDF5 embedding file per text shard, as `bin/elmo.py` writes it, on Beam's workers.

Each shard is one unit of work: a worker embeds all of its lines with the
model its process shares (`write_embeddings`: the same datasets, names,
`sentence_to_index` and root attributes as `bin/elmo.py` for the same
model and flags) and publishes the file under its final name only when it
is complete. It is built in a new directory beside a local output
(`.NAME.hdf5.<12 hex digits>.tmp`), else on the worker's disk; a rerun
removes what a stopped or killed run left there (`remove_temporaries`). A
shard whose output is complete (made from the same input, weights,
options, format, naming, start state and matmul dtype, as its root
attributes record) is never redone; a file in the way that bilm did not
write is never replaced (unless `overwrite`). Vectors never cross the
network: they are computed where the file is written.
"""
import contextlib
import os
import re
import shutil

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from bilm.beam.file_systems import fetch, is_bucket_path, join, match_files, publish, root_attributes, split
from bilm.beam.stopping import scratch_directory
from bilm.errors import UserError
from bilm.export.sentence_embeddings import embeddings_stamp
from bilm.io.formats.embedding_files import KIND, OUTPUT_FORMATS, changed_attributes
from bilm.io.formats.output_files import KIND_ATTRIBUTE, OutputFileError, check_output_file, temporary_path

OUTPUT_SUFFIX = ".hdf5"
METRICS_NAMESPACE = "bilm"
# The names bilm builds an output NAME under, beside it: `temporary_path`'s `.NAME.<12 hex digits>.tmp` (here a
# directory; earlier versions of this pipeline wrote a file of that name, first with `.partial` after it), which is
# also the name a finished file is copied to in a bucket before its rename (`file_systems.publish`).
_TEMPORARY = re.compile(r"\.(?P<output>.+)\.[0-9a-f]{12}\.tmp(\.partial)?")


def shard_outputs(input_pattern, output_dir, overwrite=False):
    """The shards `input_pattern` names and their output files, checked before any work.

    Each shard `DIR/NAME.EXT` gets `output_dir/NAME.hdf5`. Checks that the
    pattern names files, that no two shards get one output name, that the
    output directory holds no shard (a rerun's pattern would take the
    outputs for shards), and that no output is in the way (see
    `check_shard_output`); a local output directory is created. Then what
    an interrupted run left while writing these outputs is removed
    (`remove_temporaries`): one run at a time writes an output directory.

    Args:
        input_pattern: a glob of text files (local, or a bucket path).
        output_dir: the directory of the outputs (local, or a bucket path).
        overwrite: replace outputs that bilm did not write.

    Returns:
        `[(input path, output path)]`, sorted by input.
    """
    output_dir = os.fspath(output_dir)
    inputs = match_files(input_pattern)
    pairs, by_output = [], {}
    for path in inputs:
        directory, name = split(path)
        if _same_directory(directory, output_dir):
            raise UserError(f"The output directory {output_dir} holds the input {path}; the outputs would be taken "
                            "for inputs by the next run. Choose another output directory.")
        output = join(output_dir, os.path.splitext(name)[0] + OUTPUT_SUFFIX)
        if output in by_output:
            raise UserError(f"The inputs {by_output[output]} and {path} would both be written to {output}. Rename "
                            "one of them, or embed them in separate runs with separate output directories.")
        by_output[output] = path
        check_shard_output(path, output, overwrite)
        pairs.append((path, output))
    remove_temporaries([output for _, output in pairs])
    return pairs


def remove_temporaries(outputs):
    """Removes what bilm was building `outputs` in (local or bucket paths) when it was stopped or killed.

    That is each entry beside an output that bilm's temporary naming gives
    it (`.NAME.hdf5.<12 hex digits>.tmp`, a file or directory, or that with
    `.partial` after it) and nothing else, whoever made the other files.

    Returns:
        the paths removed.
    """
    names = {}
    for output in outputs:
        directory, name = split(output)
        names.setdefault(directory, set()).add(name)
    removed = []
    for directory, outputs_there in names.items():
        for path in _entries(directory):
            found = _TEMPORARY.fullmatch(split(path)[1])
            if found is None or found["output"] not in outputs_there:
                continue
            if is_bucket_path(path):
                FileSystems.delete([path])
            elif os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
            removed.append(path)
    return removed


def _entries(directory):
    """The paths of the entries of a local directory, or of the hidden files in a bucket's folder."""
    if not is_bucket_path(directory):
        return [os.path.join(directory, name) for name in os.listdir(directory)] if os.path.isdir(directory) else []
    try:
        return [metadata.path for metadata in FileSystems.match([join(directory, ".*")])[0].metadata_list]
    except Exception:  # Beam raises BeamIOError or ValueError for a folder it cannot list
        return []


def check_shard_output(input_path, output_path, overwrite=False):
    """Raises an OutputFileError if `output_path` may not be written: it is the input, or a file there is not one
    that bilm wrote as an embedding file (unless `overwrite`). A local output's directory is created."""
    if not is_bucket_path(output_path):
        check_output_file(output_path, [input_path], kind=KIND, overwrite=overwrite)
        return
    found = root_attributes(output_path)
    if found is not None and found.get(KIND_ATTRIBUTE) != KIND and not overwrite:
        raise OutputFileError(f"The output {output_path} already exists and is not an embedding file that bilm "
                              "wrote; it is never replaced without --overwrite. Choose another output directory, "
                              "or pass --overwrite to replace it.")


def write_shard(elmo, input_path, output_path, output_format="all", use_sentence_keys=False, overwrite=False):
    """Writes the embedding file of one shard, unless a complete one made the same way is there.

    Args:
        elmo: the `ELMo` model.
        input_path, output_path: the shard and its HDF5 output (local or bucket paths).
        output_format, use_sentence_keys: as in `bilm.export.write_embeddings`.
        overwrite: replace an output that bilm did not write.

    Returns:
        the number of sentence datasets written, or None when the output was complete already.
    """
    with contextlib.ExitStack() as stack:
        local_input = input_path
        if is_bucket_path(input_path):  # read from a copy on this disk
            local_input = fetch(input_path, stack.enter_context(_removed_at_end(scratch_directory())))
        stamp = embeddings_stamp(elmo.language_model, local_input, output_format, use_sentence_keys=use_sentence_keys)
        found = root_attributes(output_path)
        if found and not changed_attributes(found, stamp):
            return None
        check_shard_output(input_path, output_path, overwrite)
        staging = stack.enter_context(_removed_at_end(_staging_directory(output_path)))
        local_output = os.path.join(staging, split(output_path)[1])
        written = elmo.embed_file(local_input, local_output, layers=output_format,
                                  use_sentence_keys=use_sentence_keys, resume=False, verbose=0)
        publish(local_output, output_path)
    return written


class EmbedFiles(beam.PTransform):
    """`(input path, output path)` pairs (see `shard_outputs`) -> `(input path, output path, written)`.

    `written` is the number of sentence datasets written, or None for an
    output that was complete already. The model is loaded once per worker
    process (Beam's `shared.Shared`, as RunInference does) and shared by
    the process's threads; the shards are spread over the workers.
    Counters in the `bilm` namespace: `shards_written`, `shards_complete`,
    `sentences_written`, `model_loads`.

    Args:
        model_handler: an `ELMoModelHandler` (its `layers` are not used:
            `output_format` says what the files hold).
        output_format: `"all"`, `"top"` or `"average"`, as `bin/elmo.py`'s flags.
        use_sentence_keys: name datasets by sentence, as `--use_sentence_keys`.
        overwrite: replace outputs that bilm did not write.
    """

    def __init__(self, model_handler, output_format="all", *, use_sentence_keys=False, overwrite=False):
        super().__init__()
        if output_format not in OUTPUT_FORMATS:
            raise UserError(f"output_format must be one of {sorted(OUTPUT_FORMATS)}. "
                            f"Received: output_format={output_format!r}")
        self.model_handler = model_handler
        self.output_format = output_format
        self.use_sentence_keys = use_sentence_keys
        self.overwrite = overwrite

    def expand(self, shards):
        return (shards
                | "SpreadShards" >> beam.Reshuffle()
                | "WriteEmbeddingFiles" >> beam.ParDo(_WriteEmbeddingFiles(
                    self.model_handler, self.output_format, self.use_sentence_keys, self.overwrite)))


class _WriteEmbeddingFiles(beam.DoFn):
    def __init__(self, model_handler, output_format, use_sentence_keys, overwrite):
        self._model_handler = model_handler
        self._settings = {"output_format": output_format, "use_sentence_keys": use_sentence_keys,
                          "overwrite": overwrite}
        self._shared_model = shared.Shared()
        self._loads = 0

    def setup(self):
        def load():
            self._loads += 1
            return self._model_handler.load_model()

        self._elmo = self._shared_model.acquire(load, tag=self._model_handler.model_tag())

    def process(self, shard):
        if self._loads:  # counted here: setup runs outside any bundle
            Metrics.counter(METRICS_NAMESPACE, "model_loads").inc(self._loads)
            self._loads = 0
        input_path, output_path = shard
        written = write_shard(self._elmo, input_path, output_path, **self._settings)
        if written is None:
            Metrics.counter(METRICS_NAMESPACE, "shards_complete").inc()
        else:
            Metrics.counter(METRICS_NAMESPACE, "shards_written").inc()
            Metrics.counter(METRICS_NAMESPACE, "sentences_written").inc(written)
        yield input_path, output_path, written


def _staging_directory(output_path):
    """A new directory to build `output_path` in: beside a local output (one file system, so the rename is atomic;
    a rerun removes it if this process is killed), else a scratch directory on this disk."""
    if is_bucket_path(output_path):
        return scratch_directory()
    path = temporary_path(output_path)
    os.mkdir(path)
    return path


@contextlib.contextmanager
def _removed_at_end(directory):
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _same_directory(a, b):
    if is_bucket_path(a) or is_bucket_path(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(a) == os.path.abspath(b)
