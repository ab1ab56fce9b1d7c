"""HDF5 files of sentence embeddings: one dataset per line of a text file.

The file is built as `output + ".partial"` and renamed when complete. Its
root attributes record what it is made from: the sentence file's size and
SHA-256, and the caller's `made_from` (the weight file's and the options'
hashes, the output format...). A rerun continues a `.partial` only if all of
that is unchanged, so one file never mixes two inputs, models or formats;
otherwise it says what changed. One process at a time writes an output
(`bilm.io.formats.output_files.writer_lock`, the file `output + ".lock"`): another
one is refused before it reads or changes anything, naming the writer's PID.
See docs/formats.md, "Embedding files".
"""
import os

import h5py
import numpy as np

from bilm.errors import UserError
from bilm.io.formats.hashing import file_sha256
from bilm.io.formats.output_files import (
    KIND_ATTRIBUTE,
    OutputFileError,
    atomic_output,
    check_output_file,
    hdf5_lock_error,
    writer_lock,
)
from bilm.io.formats.sentence_files import count_lines, length_sorted_batches, read_sentences
from bilm.utils.progress import Progress

KIND = "sentence_embeddings"
# What a sentence's dataset holds, from its `(n_layers + 1, n_tokens, 2P)` layers.
OUTPUT_FORMATS = {
    "all": lambda layers: layers,
    "top": lambda layers: layers[-1],
    "average": lambda layers: layers.mean(axis=0),
}
PARTIAL_SUFFIX = ".partial"
SENTENCE_TO_INDEX = "sentence_to_index"

# How a changed root attribute is described when a resume is refused.
_DESCRIPTIONS = {
    "input_size": "the input file's size",
    "input_sha256": "the input file's content",
    "weight_sha256": "the weight file",
    "options_sha256": "the model options",
    "boundary_state_sha256": "the boundary state",
}


def embedding_file_stamp(sentences_file, made_from):
    """The root attributes of the embedding file of `sentences_file` made as
    `made_from` says (see `SentenceEmbeddingFile`): its kind, `made_from`,
    and the sentence file's size and SHA-256."""
    return {KIND_ATTRIBUTE: KIND, **made_from, "input_size": os.path.getsize(sentences_file),
            "input_sha256": file_sha256(sentences_file)}


def read_root_attributes(file):
    """The root attributes of an HDF5 file (a path or a binary file object
    open for reading) as plain Python values. Raises OSError if it is not
    a readable HDF5 file."""
    with h5py.File(file, "r") as f:
        return {key: _plain(value) for key, value in f.attrs.items()}


def changed_attributes(found, stamp):
    """The keys of `stamp` whose value differs in `found` (root attributes,
    see `read_root_attributes`): [] when a file holds what `stamp` describes."""
    return [key for key, value in stamp.items() if found.get(key) != value]


def check_sentences_file(sentences_file):
    """Raises FileNotFoundError naming `sentences_file` when it is not a file."""
    if os.path.isdir(sentences_file):
        raise UserError(f"Input {sentences_file} is a directory: give one text file, one whitespace-tokenized "
                        "sentence per line (python -m bilm.beam --input 'DIR/*.txt' embeds a folder's files).")
    if not os.path.isfile(sentences_file):
        raise FileNotFoundError(f"Input file not found: {sentences_file} (expected a text file, one "
                                "whitespace-tokenized sentence per line).")


def line_number_key(number, line):
    """The default dataset name: the 0-based line number."""
    return str(number)


class SentenceEmbeddingFile:
    """One run writing the embeddings of every line of `sentences_file`.

    Everything that can fail before the work is checked when it is made:
    no other process is writing the output (its writer lock is taken here
    and held until `write` ends or `close` is called; use it in a `with`
    block to release it on any error), the sentence file exists, the
    output is not an input and replaces no file bilm did not write, the
    directory is writable, and a `.partial` to resume was made from the
    same input and settings. `write` then embeds what is left and renames
    the finished file.

    Args:
        sentences_file: text, one whitespace-tokenized sentence per line.
        output_file: the HDF5 file to write.
        made_from: `{name: str, int, float or bool}` describing how the
            vectors are made, recorded on the file (with the sentence file's
            size and hash) and compared on resume.
        inputs: other files the run reads (weights, options, vocabulary):
            the output may not be one of them.
        resume: continue an interrupted run's `.partial`; otherwise start over.
        overwrite: replace an existing output or `.partial` that bilm did
            not write as a sentence embedding file.
        verbose: progress and a line when resuming.

    Attributes:
        partial: the working name, `output_file + ".partial"`.
        resuming: whether `write` continues a `.partial`.
        n_lines: lines of the sentence file.
    """

    def __init__(self, sentences_file, output_file, made_from, inputs=(), resume=True, overwrite=False,
                 verbose=1):
        sentences_file = os.fspath(sentences_file)
        check_sentences_file(sentences_file)
        self._lock = writer_lock(output_file)
        self._lock.__enter__()
        try:
            self.output_file, self.partial = self.check_paths(sentences_file, output_file, inputs, overwrite)
            self.sentences_file = sentences_file
            self.verbose = verbose
            self.stamp = embedding_file_stamp(sentences_file, made_from)
            self.resuming = resume and os.path.exists(self.partial)
            if self.resuming:
                self._check_resumable()
            self.n_lines = count_lines(sentences_file)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Releases the output's writer lock (`write` does when it ends)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.__exit__(None, None, None)

    @staticmethod
    def check_paths(sentences_file, output_file, inputs=(), overwrite=False):
        """The path checks of the constructor alone (no hashing): the
        sentence file exists, no other process is writing the output, the
        output and its `.partial` are no input and replace no file bilm did
        not write. Returns `(output, partial)`."""
        check_sentences_file(sentences_file)
        inputs = (sentences_file, *inputs)
        with writer_lock(output_file):
            output_file = check_output_file(output_file, inputs, kind=KIND, overwrite=overwrite)
            partial = check_output_file(output_file + PARTIAL_SUFFIX, inputs, kind=KIND, overwrite=overwrite)
        return output_file, partial

    def _check_resumable(self):
        try:
            found = read_root_attributes(self.partial)
        except OSError as error:
            locked = hdf5_lock_error(self.partial, error)
            if locked is not None:
                raise locked from None
            raise OutputFileError(
                f"Cannot resume from {self.partial}: it is not a readable HDF5 file ({error}). Start over "
                "with --no_resume (resume=False).") from None
        changed = changed_attributes(found, self.stamp)
        if "input_size" in changed and found.get("input_size") is not None:
            changed.remove("input_sha256")  # a new size says enough
        changes = [_describe_change(key, found.get(key), self.stamp[key]) for key in changed]
        if changes:
            raise OutputFileError(
                f"Cannot resume from {self.partial}: it was made from something else than this run ("
                + "; ".join(changes) + "). Its vectors would not match the new ones. Start over with "
                "--no_resume (resume=False), or rerun with what it was made from.")

    def write(self, embed_batch, batch_size=None, key_of=line_number_key, extra_datasets=None):
        """Embeds the lines the file does not hold yet and renames it when complete.

        Args:
            embed_batch: `(list of token lists) -> list of np.ndarray`, one
                array per sentence, stored as float32.
            batch_size: sentences per call, or None for calls of about
                `BULK_MAX_TOKENS` tokens (batched by length either way, see
                `length_sorted_batches`).
            key_of: `(line_number, line) -> dataset name`; lines with a name
                already in the file are not embedded again.
            extra_datasets: `() -> {name: np.ndarray}` written (or replaced)
                at the end.

        Returns:
            the number of datasets this call wrote.
        """
        if self._lock is None:
            raise RuntimeError("This SentenceEmbeddingFile was closed; make a new one to write.")
        try:
            return self._write(embed_batch, batch_size, key_of, extra_datasets)
        finally:
            self.close()

    def _write(self, embed_batch, batch_size, key_of, extra_datasets):
        written = done = 0
        if not self.resuming:
            # A new file renamed into place: an old `.partial` is replaced whole, never truncated under a
            # program that may still have it open.
            with atomic_output(self.partial) as tmp, h5py.File(tmp, "w") as fout:
                fout.attrs.update(self.stamp)
        with h5py.File(self.partial, "a") as fout:
            todo = ((n, line, tokens) for n, line, tokens in read_sentences(self.sentences_file)
                    if key_of(n, line) not in fout)
            # The bar counts this call's sentences only, so a resumed run's
            # rate and time left are its own.
            remaining = max(self.n_lines - len(fout), 0)
            progress = Progress(remaining, unit="sentence", verbose=self.verbose and remaining)
            if self.resuming and self.verbose:
                print(f"Resuming {self.partial}: {len(fout):,} of {self.n_lines:,} lines are done.")
            try:
                for batch in length_sorted_batches(todo, batch_size):
                    embeddings = embed_batch([tokens for _, _, tokens in batch])
                    for (number, line, _), embedding in zip(batch, embeddings):
                        key = key_of(number, line)
                        if key not in fout:  # a repeated name is stored once
                            fout.create_dataset(key, data=np.asarray(embedding, dtype=np.float32))
                            written += 1
                    fout.flush()
                    done += len(batch)
                    progress.update(done)
            finally:
                progress.close()
            if extra_datasets is not None:
                for name, value in extra_datasets().items():
                    if name in fout:
                        del fout[name]
                    fout.create_dataset(name, data=value)
        os.replace(self.partial, self.output_file)
        return written


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _describe_change(key, found, wanted):
    if found is None:
        return f"it does not record {_DESCRIPTIONS.get(key, key)}"
    if key == "input_size":
        return f"the input file's size changed from {found:,} to {wanted:,} bytes"
    if key in _DESCRIPTIONS:
        return f"{_DESCRIPTIONS[key]} changed"
    return f"{key} was {found!r}, now {wanted!r}"
