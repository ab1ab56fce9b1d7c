"""The whole job on a small built-in corpus: train, evaluate, dump, embed.

`python bin/quickstart.py` writes a generated corpus, trains a tiny biLM
on it for a couple of minutes, reports held-out perplexity against the
unigram baseline, dumps the weights in the original layout and embeds a
few sentences with them.
"""
import os
import shutil

from bilm.errors import UserError
from bilm.io.output_files import check_output_directory
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.options import save_options
from bilm.presets import training_options
from bilm.text.batching import Batcher
from bilm.training.convert.weight_export import dump_weights
from bilm.training.data.sample_corpus import unigram_perplexity, write_sample_corpus
from bilm.training.run.from_files import test_from_files, train_from_files

EXAMPLE_SENTENCES = [
    ["the", "old", "dog", "sees", "a", "small", "cat", "."],
    ["a", "cat", "sleeps", "."],
]


def quickstart_options(n_epochs=8):
    """The tiny preset in its training form, sized for a couple of CPU minutes."""
    return training_options("tiny", batch_size=32, unroll_steps=10, n_negative_samples_batch=64, n_epochs=n_epochs,
                            dropout=0.1, learning_rate=0.2)


# Marks a directory as the quick start's own, so that a rerun may start over in it.
MARKER = ".bilm_quickstart"


def prepare_directory(directory):
    """Makes `directory` the quick start's: new, empty, or its own from an
    earlier run (whose checkpoints are removed, so training starts over).
    Returns whether it starts over."""
    marker = os.path.join(directory, MARKER)
    if os.path.exists(marker):
        shutil.rmtree(os.path.join(directory, "checkpoint"), ignore_errors=True)
        return True
    if os.path.isdir(directory) and os.listdir(directory):
        raise UserError(
            f"{directory} already holds files that the quick start did not write. Pass a new or empty "
            "directory with --directory.")
    check_output_directory(directory)
    open(marker, "w").close()
    return False


def run_quickstart(directory, n_epochs=8, verbose=1):
    """Runs the whole job in `directory` (see `prepare_directory`); returns a
    dict of what it measured and wrote."""
    if prepare_directory(directory) and verbose:
        print(f"Starting over in {directory}: the earlier quick start's checkpoints are removed.")
    corpus = write_sample_corpus(os.path.join(directory, "corpus"))
    options_file = os.path.join(directory, "train_options.json")
    options = quickstart_options(n_epochs)
    save_options(options, options_file)
    save_dir = os.path.join(directory, "checkpoint")
    train_from_files(corpus["train_prefix"], corpus["vocab_file"], save_dir, options_file,
                     heldout_prefix=corpus["heldout_prefix"], verbose=verbose)
    # Held-out rows per batch as in training's end-of-epoch evaluation, so the
    # two numbers agree (each row carries its LSTM state along the text).
    perplexity = test_from_files(corpus["heldout_prefix"], corpus["vocab_file"], save_dir,
                                 batch_size=options["batch_size"], verbose=0)
    # What it costs to embed each sentence on its own: the held-out text with
    # every sentence starting from zeros, or from the boundary state.
    by_start = {start: test_from_files(corpus["heldout_prefix"], corpus["vocab_file"], save_dir,
                                       batch_size=options["batch_size"], verbose=0, start=start)
                for start in ("zeros", "warm")}
    unigram = unigram_perplexity(corpus["heldout_prefix"], corpus["vocab_file"])
    written = dump_weights(save_dir, os.path.join(directory, "weights.hdf5"))
    bilm = BidirectionalLanguageModel(written["options_file"], written["weight_file"], stateful=False)
    ids = Batcher(corpus["vocab_file"], 50).batch_sentences(EXAMPLE_SENTENCES)
    lm_embeddings = bilm(ids)["lm_embeddings"]
    return {"heldout_perplexity": perplexity, "unigram_perplexity": unigram,
            "zeros_start_perplexity": by_start["zeros"], "warm_start_perplexity": by_start["warm"],
            "lm_embeddings_shape": tuple(lm_embeddings.shape), **written}
