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
import itertools
import math
import os

import numpy as np
import tensorflow as tf

import numpy_reference as R
from bilm.training.arrays import softmax_init as array_softmax_init
from bilm.training.arrays import training_run as array_training_run
from bilm.training.config.settings import training_settings
from bilm.training.convert import tensorflow_state
from bilm.training.run import run_checkpoint
from bilm.training.run.from_files import load_training_data
from tensorflow_reference import checkpoints
from tensorflow_reference.optimizers import global_norm_scale, make_optimizer
from tensorflow_reference.training_lm import TrainingLM

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
MAX_CHARS = 10

# The data tests' shard: characters per token, the vocabulary
# (ids: <S> 0, </S> 1, <UNK> 2, a 3, b 4, c 5, d 6, e 7) and the lines
# ("zz" is out of vocabulary).
C = 5
TOKENS = ["a", "b", "c", "d", "e"]
LINES = ["a b c", "zz", "e a b c d", "b", "c d"]


def after_each_step(monkeypatch, callback):
    """Has each step of `train` call `callback(n)` once it has ended (n: the step's number in its call, from 1),
    whichever step the backend's run takes: the loop's `run_steps` gets the run's step wrapped."""
    from bilm.training.run import loop

    original = loop.run_steps

    def run_steps(run, step_fn, *args, **kwargs):
        taken = itertools.count(1)

        def step(batch, number, requests):
            outputs = step_fn(batch, number, requests)
            callback(next(taken))
            return outputs

        return original(run, step, *args, **kwargs)

    monkeypatch.setattr(loop, "run_steps", run_steps)


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
    """The steps of the run's checkpoints in `save_dir` (its `checkpoint.npz` and the earlier ones kept), sorted."""
    meta = run_checkpoint.read_meta(save_dir)
    kept = [step for step, _ in run_checkpoint.kept_checkpoints(save_dir)]
    return sorted(kept + ([] if meta is None else [meta["step"]]))


def checkpoint_arrays(path, prefixes=("model", "softmax", "optimizer", "lstm_states", "step", "data")):
    """`{name: array}` of a checkpoint's values under the given top-level names, named as a TensorFlow
    checkpoint names them (`softmax/W/.ATTRIBUTES/VARIABLE_VALUE`, `step/...`): a run's `checkpoint.npz` (or a
    copy kept beside it), its state keys mapped by `bilm.training.convert.tensorflow_state`, or an earlier
    run's TensorFlow checkpoint prefix."""
    path = os.fspath(path)
    if not path.endswith(".npz"):
        reader = tf.train.load_checkpoint(path)
        return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
                if name.startswith(prefixes)}
    meta = run_checkpoint.read_file_meta(path)
    options, settings = training_settings(meta["options"], need_schedule=False)
    network = TrainingLM(options, settings).network
    with np.load(path) as stored:
        state = {key: stored[key] for key in stored.files
                 if key != "__meta__" and not key.startswith(run_checkpoint.BOUNDARY_STATE_PREFIX)}
    template = {}
    for key in state:
        part, _, rest = key.partition("/")
        if part in ("bilm", "non_trainable"):
            template.setdefault(part, {})[int(rest)] = 0
        elif part == "optimizer" and rest != "iterations":
            slot, _, name = rest.partition("/")
            template.setdefault(part, {}).setdefault(slot, {})[name] = 0
        else:
            template.setdefault(part, {})[rest] = 0
    template = {part: [0] * len(value) if part in ("bilm", "non_trainable") else value
                for part, value in template.items()}
    names = tensorflow_state.object_paths(template, [v.path for v in network.trainable_variables],
                                          [v.path for v in network.non_trainable_variables], settings.optimizer)
    arrays = {tensorflow_state.checkpoint_key(names[key]): value for key, value in state.items()}
    for name, key in (("step", "step"), ("data/batches", "data_batches"), ("data/source", "data_source")):
        arrays[tensorflow_state.checkpoint_key(name)] = np.int64(meta[key] or 0)
    return {name: value for name, value in arrays.items() if name.startswith(prefixes)}


def as_tensorflow_checkpoints(save_dir, record_optimizer=True):
    """Rewrites the run in `save_dir` as runs on TensorFlow wrote it before every backend wrote one format: each
    of its checkpoints (`checkpoint.npz` and the earlier ones kept) as `model.ckpt-<step>` of a
    `tf.train.CheckpointManager`, with the optimizer's name (unless `record_optimizer` is False, as before it was
    recorded) and the vocabulary's fingerprint; the `.npz` files are removed. Returns the newest prefix."""
    save_dir = os.fspath(save_dir)
    kept = [path for _, path in run_checkpoint.kept_checkpoints(save_dir)]
    prefix = None
    for path in kept + [run_checkpoint.read_meta(save_dir)["path"]]:
        meta = run_checkpoint.read_file_meta(path)
        options, settings = training_settings(meta["options"], need_schedule=False)
        lm = TrainingLM(options, settings)
        optimizer = make_optimizer(settings, lm.trainable_variables())
        with np.load(path) as stored:
            lstm = {key[len("lstm/"):]: tf.Variable(stored[key]) for key in stored.files if key.startswith("lstm/")}
        step = tf.Variable(meta["step"], dtype=tf.int64)
        data = {"batches": tf.Variable(meta["data_batches"], dtype=tf.int64),
                "source": tf.Variable(meta["data_source"] or 0, dtype=tf.int64)}
        checkpoints.restore_training(meta, lm, optimizer, lstm)
        parts = {"model": lm.bilm_variables(), "softmax": lm.softmax_variables(), "optimizer": optimizer.accumulators,
                 "boundary_state": {**lm.boundary_state, "n_starts": lm.n_boundary_starts}, "step": step,
                 "lstm_states": lstm, "data": data}
        if record_optimizer:
            parts["metadata"] = {"optimizer": tf.Variable(settings.optimizer, dtype=tf.string, trainable=False)}
        if meta["vocabulary"] is not None:
            parts["vocabulary"] = tf.Variable(meta["vocabulary"], dtype=tf.int64, trainable=False)
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(**parts), save_dir, max_to_keep=None,
                                             checkpoint_name="model.ckpt")
        prefix = manager.save(checkpoint_number=meta["step"])
        os.remove(path)
    return prefix


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
    monkeypatch.setattr(array_training_run, "initialize_softmax_of_state",
                        functools.partial(array_softmax_init.initialize_softmax_of_state, n_positions=n_positions))
