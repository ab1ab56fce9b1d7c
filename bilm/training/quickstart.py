"""The whole job on a small built-in corpus: train, evaluate, dump, embed.

`python bin/quickstart.py` writes a generated corpus, trains a tiny biLM
on it for a couple of minutes, reports held-out perplexity against the
unigram baseline, dumps the weights in the original layout and embeds a
few sentences with them. Run again in its directory, it starts over,
replacing only the files it left there unchanged (its marker records their
SHA-256), each once its new version is complete.
"""
import hashlib
import json
import os

from bilm.errors import UserError
from bilm.io.formats.hashing import file_sha256
from bilm.io.formats.output_files import atomic_output, check_output_directory, writer_lock
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.options import save_options
from bilm.options.model_options import options_json
from bilm.presets import training_options
from bilm.text.batching import Batcher
from bilm.training import evaluate_from_files, train_from_files  # the backend's: the array trainer's on JAX and PyTorch
from bilm.training.convert.weight_export import dump_weights
from bilm.training.data.sample_corpus import unigram_perplexity, write_sample_corpus

EXAMPLE_SENTENCES = [
    ["the", "old", "dog", "sees", "a", "small", "cat", "."],
    ["a", "cat", "sleeps", "."],
]


def quickstart_options(n_epochs=8):
    """The tiny preset in its training form, sized for a couple of CPU minutes."""
    return training_options("tiny", batch_size=32, unroll_steps=10, n_negative_samples_batch=64, n_epochs=n_epochs,
                            dropout=0.1, learning_rate=0.2)


# Marks a directory as the quick start's own and records, as JSON, the SHA-256 of every file it wrote there
# (`{"files": {relative path: sha256}}`), so that a rerun replaces only what it finds as it left it.
MARKER = ".bilm_quickstart"
# What the quick start writes in its directory.
ENTRIES = ("corpus", "train_options.json", "checkpoint", "weights.hdf5", "weights_options.json")


class QuickstartDirectory:
    """The quick start's directory: new, empty, or its own from an earlier run.

    Made before any work: a missing or empty directory is claimed (the
    marker is written in it); a directory with the marker is the quick
    start's own; any other is an error. Nothing is deleted or replaced here:
    `check` tells, before the work, whether each entry the run writes may be
    replaced, and `record` notes each entry once it is written.

    Attributes:
        directory: its absolute path.
        rerun: whether an earlier quick start had claimed it.
    """

    def __init__(self, directory):
        self.directory = os.path.abspath(os.fspath(directory))
        self.marker = os.path.join(self.directory, MARKER)
        self.rerun = os.path.exists(self.marker)
        if self.rerun:
            self.files = _read_marker(self.marker)
            return
        if os.path.isdir(self.directory) and os.listdir(self.directory):
            raise UserError(
                f"{self.directory} already holds files that the quick start did not write. Pass a new or empty "
                "directory with --directory.")
        check_output_directory(self.directory)
        self.files = {}
        self._write_marker()

    def check(self, expected=None):
        """Raises unless each entry of `ENTRIES` present is as the quick start
        left it (all its files, and only those, with the SHA-256 recorded), or
        holds what this run writes: `expected` maps an entry to the
        fingerprints (`fingerprints`, relative to that entry) it will have."""
        expected = expected or {}
        for entry in ENTRIES:
            path = os.path.join(self.directory, entry)
            if not os.path.lexists(path):
                continue
            found = None if os.path.islink(path) else fingerprints(path)
            recorded = {name[len(entry):]: sha for name, sha in self.files.items()
                        if name == entry or name.startswith(entry + "/")}
            if found != recorded and found != expected.get(entry):
                raise UserError(
                    f"{path} is not as the quick start left it (its files were changed or added to), so the quick "
                    f"start does not replace it. Move it out of {self.directory}, or pass another --directory.")

    def record(self, entry):
        """Notes the files of `entry` (as written now) as the quick start's."""
        self.files = {name: sha for name, sha in self.files.items()
                      if not (name == entry or name.startswith(entry + "/"))}
        path = os.path.join(self.directory, entry)
        if os.path.lexists(path):
            self.files.update({entry + name: sha for name, sha in fingerprints(path).items()})
        self._write_marker()

    def _write_marker(self):
        with atomic_output(self.marker) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump({"files": dict(sorted(self.files.items()))}, f, indent=1)


def fingerprints(path):
    """`{name: sha256}` of the file `path` (name "") or of every file under the directory `path` (names
    "/a/b" relative to it)."""
    if not os.path.isdir(path):
        return {"": file_sha256(path)}
    found = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            found["/" + os.path.relpath(full, path).replace(os.sep, "/")] = file_sha256(full)
    return found


def _read_marker(marker):
    """The files a marker records; none for an empty one (an earlier bilm wrote the marker empty)."""
    try:
        with open(marker, encoding="utf-8") as f:
            files = json.load(f).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {name: sha for name, sha in files.items() if isinstance(name, str) and isinstance(sha, str)}


def prepare_directory(directory):
    """Makes `directory` the quick start's (see `QuickstartDirectory`);
    returns whether an earlier quick start had made it its own."""
    return QuickstartDirectory(directory).rerun


def run_quickstart(directory, n_epochs=8, verbose=1):
    """Runs the whole job in `directory` (see `QuickstartDirectory`); returns a
    dict of what it measured and wrote.

    A rerun in its own directory starts over: each entry it writes there
    (`ENTRIES`) is replaced only if it is as the earlier run left it or holds
    what this run writes, all checked before any work, and only once its
    new version is complete (the checkpoints are trained beside the old
    ones). One quick start at a time works in a directory."""
    with writer_lock(directory):
        return _run(QuickstartDirectory(directory), n_epochs, verbose)


def _run(own, n_epochs, verbose):
    directory = own.directory
    options = quickstart_options(n_epochs)
    options_file = os.path.join(directory, "train_options.json")
    corpus_dir = os.path.join(directory, "corpus")
    with atomic_output(corpus_dir, directory=True) as new_corpus:
        written_corpus = write_sample_corpus(new_corpus)
        own.check({"corpus": fingerprints(new_corpus),
                   "train_options.json": {"": hashlib.sha256(options_json(options).encode("utf-8")).hexdigest()}})
        if own.rerun and verbose:
            print(f"Starting over in {directory}: the earlier quick start's files are replaced as the new ones "
                  "are complete.")
    corpus = {key: os.path.join(corpus_dir, os.path.relpath(path, new_corpus))
              for key, path in written_corpus.items()}
    own.record("corpus")
    save_options(options, options_file)
    own.record("train_options.json")
    save_dir = os.path.join(directory, "checkpoint")
    with atomic_output(save_dir, directory=True) as new_save_dir:  # the earlier run's stay until this one is done
        trained = train_from_files(corpus["train_prefix"], corpus["vocab_file"], new_save_dir, options_file,
                                   heldout_prefix=corpus["heldout_prefix"], verbose=verbose)
    own.record("checkpoint")
    # The held-out perplexity training measured at its last epoch's end, of the weights its checkpoint holds,
    # with the carried states and rows per batch that evaluating the checkpoint would use: the same figure.
    perplexity = trained["heldout_perplexity"]
    # What it costs to embed each sentence on its own: the held-out text with every sentence starting from
    # zeros, or from the boundary state (the model built once for both).
    by_start = evaluate_from_files(corpus["heldout_prefix"], corpus["vocab_file"], save_dir,
                                   batch_size=options["batch_size"], verbose=0, start=("zeros", "warm"))
    unigram = unigram_perplexity(corpus["heldout_prefix"], corpus["vocab_file"])
    # Checked above: an earlier weight or options file there is the quick start's own.
    written = dump_weights(save_dir, os.path.join(directory, "weights.hdf5"), overwrite=True)
    own.record("weights.hdf5")
    own.record("weights_options.json")
    bilm = BidirectionalLanguageModel(written["options_file"], written["weight_file"], stateful=False)
    ids = Batcher(corpus["vocab_file"], 50).batch_sentences(EXAMPLE_SENTENCES)
    lm_embeddings = bilm(ids)["lm_embeddings"]
    return {"heldout_perplexity": perplexity, "unigram_perplexity": unigram,
            "zeros_start_perplexity": by_start["zeros"], "warm_start_perplexity": by_start["warm"],
            "lm_embeddings_shape": tuple(lm_embeddings.shape), **written}

