"""Shared pieces of the training tests: a small structured corpus, tiny options, the data tests' shard.

The corpus is made of runs of consecutive words of a 20-word cycle
("alpha bravo charlie", "tango alpha bravo ..."): every word but the first
of a sentence is predictable from the previous one (forward) or the next
one (backward), so a biLM quickly goes far below the unigram perplexity.

The data tests (shards, windows, tf.data) read a five-line shard over a
five-token vocabulary instead, small enough to spell out their batches.
"""
import collections
import functools
import math
import os

import numpy as np
import tensorflow as tf

import numpy_reference as R
from bilm.optimizers import global_norm_scale
from bilm.training.model import softmax_init
from bilm.training.run import run_origin
from bilm.training.run.from_files import load_training_data

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
MAX_CHARS = 10

# The data tests' shard: characters per token, the vocabulary
# (ids: <S> 0, </S> 1, <UNK> 2, a 3, b 4, c 5, d 6, e 7) and the lines
# ("zz" is out of vocabulary).
C = 5
TOKENS = ["a", "b", "c", "d", "e"]
LINES = ["a b c", "zz", "e a b c d", "b", "c d"]


def cycle_sentences(n, seed):
    rng = np.random.default_rng(seed)
    sentences = []
    for _ in range(n):
        start, length = rng.integers(len(WORDS)), rng.integers(3, 9)
        sentences.append(" ".join(WORDS[(start + k) % len(WORDS)] for k in range(length)))
    return sentences


def write_corpus(directory, n_train=2000, n_heldout=200, seed=0, shards=2):
    """Writes train shards, a held-out file and the vocabulary; returns their paths."""
    train = cycle_sentences(n_train, seed)
    per_shard = len(train) // shards
    for i in range(shards):
        (directory / f"train_{i}.txt").write_text("\n".join(train[i * per_shard:(i + 1) * per_shard]) + "\n")
    (directory / "heldout.txt").write_text("\n".join(cycle_sentences(n_heldout, seed + 1)) + "\n")
    (directory / "vocab.txt").write_text("\n".join(["<S>", "</S>", "<UNK>"] + WORDS) + "\n")
    return {"train": str(directory / "train_*.txt"), "heldout": str(directory / "heldout.txt"),
            "vocab": str(directory / "vocab.txt"), "n_vocab": len(WORDS) + 3}


def unigram_perplexity(corpus):
    """Perplexity on the held-out file of unigram frequencies fitted on the training shards.

    Targets are the words and one end marker per sentence, as the biLM's
    next-token targets (add-one smoothing).
    """
    def targets(path_pattern):
        for path in sorted(tf.io.gfile.glob(path_pattern)):
            with open(path) as f:
                for line in f:
                    yield from line.split() + ["</S>"]

    counts = collections.Counter(targets(corpus["train"]))
    total = sum(counts.values()) + len(WORDS) + 1
    heldout = list(targets(corpus["heldout"]))
    log_prob = sum(math.log((counts[t] + 1) / total) for t in heldout)
    return math.exp(-log_prob / len(heldout))


def tiny_options(char=True, bidirectional=True, skip=True, **training):
    """Options for a tiny biLM (dim 16, projection 8) on the 23-token vocabulary."""
    options = R.make_options(
        char_cnn=char, n_characters=261, lstm_dim=16, projection_dim=8, filters=((1, 8), (2, 8), (3, 16)),
        char_dim=4, max_chars=MAX_CHARS, use_skip_connections=skip)
    options.update(bidirectional=bidirectional, dropout=0.0, n_tokens_vocab=len(WORDS) + 3, batch_size=16,
                   unroll_steps=5, n_negative_samples_batch=8, n_epochs=1, n_train_tokens=16 * 5 * 100,
                   learning_rate=0.3, all_clip_norm_val=10.0)
    options.update(training)
    return options


def open_data(options, corpus, test=False, seed=0):
    data, _ = load_training_data(options, corpus["heldout" if test else "train"], corpus["vocab"],
                                 test=test, seed=seed)
    return data


def checkpoint_numbers(save_dir):
    """The steps of the checkpoints in `save_dir`, sorted."""
    return sorted(int(name.split("-")[1].split(".")[0]) for name in os.listdir(save_dir)
                  if name.startswith("model.ckpt-") and name.endswith(".index"))


def checkpoint_arrays(path, prefixes=("model", "softmax", "optimizer", "lstm_states", "step", "data")):
    """`{name: array}` of a checkpoint's variables under the given top-level names."""
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith(prefixes)}


def scale_gradient(gradient, scale):
    """`gradient * scale` for a tensor or `IndexedSlices`."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * scale, gradient.indices, gradient.dense_shape)
    return gradient * scale


def clip_by_global_norm(gradients, clip_norm):
    """`tf.clip_by_global_norm` kept sparse, from `global_norm_scale`: `(clipped list, norm)`."""
    scale, norm = global_norm_scale(gradients, clip_norm)
    return [scale_gradient(g, scale) for g in gradients], norm


# Target positions an adapted run's softmax fit (or scale fit) reads in the tests: about one pass over
# their small texts (the library's default, `softmax_init.DEFAULT_SAMPLE_POSITIONS`, reads 100,000: a tiny
# text dozens of times over, the same positions again).
SOFTMAX_FIT_POSITIONS = 4000


def small_softmax_fit(monkeypatch, n_positions=SOFTMAX_FIT_POSITIONS):
    """Adapted runs of this test fit their new softmax on `n_positions` positions of the training text."""
    monkeypatch.setattr(run_origin, "initialize_softmax",
                        functools.partial(softmax_init.initialize_softmax, n_positions=n_positions))
