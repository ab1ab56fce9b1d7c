#!/usr/bin/env python
"""How much the biLM learns in a fixed number of steps (issue 28), several seeds.

Trains a small character model with bilm's own `train` for `--steps` steps
on a corpus this script writes itself, once per seed, and prints per
direction these measures of what it has learnt, with their mean and spread
over the seeds:

- held-out, training states: the held-out loss (batch 256, one step per
  batch, states carried, full softmax, no dropout) after every
  `--eval_every` steps of the last `--eval_window` steps, averaged, with
  each row starting from the training stream's current LSTM states. The
  measure to compare recipes with.
- train: the mean training loss of the last `--train_window` steps (dropout
  included). Each batch is new text when it is trained on (a run reads
  less than one epoch), so it is about as steady. But it flatters bilm's
  own layout: the backward stream reads the sentences the forward stream
  reads, cut at other places, so one direction's targets of a step are
  often the other direction's targets of the step before (the shared char
  CNN and softmax have just been trained on them). Use it to compare
  variants with the same stream layout only.
- held-out, zeros (mean over the window, and the last checkpoint alone):
  bilm's evaluation as bilm-tf's `test` does it, every row starting from
  zero states. Early in training a model started from zeros can fall into
  a state that training never visits and stay there for the rest of the
  text: the loss of such a checkpoint jumps by up to 10 nats in one
  direction while the training loss is smooth (docs/learning_parity.md).
  Printed to show it, not to compare with.

Each is given as a loss (nats) and as the perplexity `exp(loss)`; the
spread is the standard deviation over seeds, in nats, which is also the
relative spread of the perplexity.

The corpus is pseudo-English from a hidden-class Markov chain: made-up
words with English letter frequencies and English-like token lengths
(the frequent words short), Zipfian word frequencies, each word in one of
`--classes` classes, each class followed mostly by four others (so there is
context to learn), sentence lengths around 20 tokens ending in "." and
a few ",". Nothing is downloaded; the same `--corpus_seed` writes the same
bytes.

Recipes (`--recipes`, each run with every seed on the same corpus):

  bilm
      bilm's training recipe, as `bin/train_elmo.py` runs it (the
      original's: Adagrad 0.2).
  adam
      bilm's opt-in Adam (`optimizer: "adam"`, learning rate 0.002).
  shared_lstm_init
      ABLATION, NOT BILM'S CODE: the defect bilm had until issue 28. Its
      ProjectedLSTM drew the input kernel W_x and the recurrent kernel W_h
      from one Keras initializer instance, which keeps the seed it drew
      when made, so W_h started equal to the first rows of W_x (all of it
      when the input is projection_dim wide, as in every biLM). This wraps
      `ProjectedLSTM.build`, inside this process and for this recipe only,
      to copy those rows again.
  twin_backward
      ABLATION, NOT BILM'S RECIPE: the layout bilm had until issue 28, the
      backward stream reading the forward stream's sentences (same
      shuffle) reversed, instead of its own shuffle of the corpus.

Other settings (flags): `--dropout`, `--softmax full|sampled`
(`--n_negative`), sizes.

Instrumentation: `bilm.training.arrays.training_run.ArrayTrainStep` is replaced, for this
process only, by a subclass that records each step's per-direction loss
and evaluates the held-out text (both ways) after the steps of the
evaluation window. It does not change the step.

Quick run (a minute or two): python bench/bench_learning.py --steps 40 --seeds 0 \\
    --train_window 20 --eval_every 20 --eval_window 20 --corpus_tokens 60000 --heldout_sentences 300
Comparisons of issue 28 (about 4 minutes a run on one core):
    python bench/bench_learning.py --recipes bilm,shared_lstm_init --seeds 0,1,2,3
"""
import contextlib
import glob
import math
import os
import sys
import tempfile
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import REFERENCE_MODEL  # noqa: E402
from real_text import write_shards  # noqa: E402

from bilm.layers.projected_lstm import ProjectedLSTM  # noqa: E402
from bilm.training import LMDataset, build_vocab  # noqa: E402
from bilm.training.arrays import training_run  # noqa: E402
from bilm.training.arrays.evaluation import evaluate_starts  # noqa: E402
from bilm.training.arrays.train_step import ArrayTrainStep  # noqa: E402
from bilm.training.data.sample_corpus import unigram_perplexity  # noqa: E402
from bilm.training.run import loop  # noqa: E402
from bilm.training.run.from_files import load_training_data  # noqa: E402

# --- Corpus ----------------------------------------------------------------

LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
# English letter frequencies (percent), in the order of LETTERS.
LETTER_WEIGHTS = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0,
                           2.0, 1.9, 1.5, 1.0, 0.8, 0.15, 0.15, 0.1, 0.07])
# Punctuation tokens and their frequency rank among the words (a comma is about as frequent as "of").
PUNCTUATION_RANKS = {",": 1}


def made_up_words(n_words, rng):
    """`n_words` distinct made-up words in frequency-rank order, letters drawn
    with English letter frequencies. The word of rank r has about
    `2 + 1.3 log10(r + 1)` letters (sd 2, at least 1): the frequent words
    short, the rare ones long, 4.5 to 5 letters per running token under
    Zipfian frequencies, as English text."""
    letters = np.array(list(LETTERS))
    p = LETTER_WEIGHTS / LETTER_WEIGHTS.sum()
    ranks = np.arange(n_words)
    lengths = np.clip(np.round(rng.normal(2.0 + 1.3 * np.log10(ranks + 1), 2.0)), 1, 20).astype(int)
    words, seen = [], set(PUNCTUATION_RANKS) | {"."}
    for length in lengths:
        word = "".join(rng.choice(letters, size=length, p=p))
        while word in seen:  # taken: one letter longer
            word += rng.choice(letters, p=p)
        seen.add(word)
        words.append(word)
    for token, rank in PUNCTUATION_RANKS.items():
        words.insert(rank, token)
    return words[:n_words]


class HiddenClassChain:
    """Pseudo-English sentences from a hidden-class Markov chain.

    Word `i` (frequency rank) has Zipf weight `(i + 1) ** -zipf` and belongs
    to one class; a class emits its words in proportion to their weights.
    Each class is followed by four others with Dirichlet-drawn
    probabilities (98%) or by any class (2%), so the next word depends on
    the previous ones. Sentences have log-normal lengths (median 20) and end
    in ".".
    """

    def __init__(self, n_words, n_classes, zipf, rng):
        self.rng = rng
        self.words = np.array(made_up_words(n_words, rng), dtype=object)
        weights = np.arange(1, n_words + 1, dtype=np.float64) ** -zipf
        word_class = rng.integers(0, n_classes, size=n_words)
        self.members, self.cumulative = [], []
        for k in range(n_classes):
            ids = np.flatnonzero(word_class == k)
            if ids.size == 0:  # a class with no word emits the most frequent one
                ids = np.array([0])
            self.members.append(ids)
            self.cumulative.append(np.cumsum(weights[ids]) / weights[ids].sum())
        transitions = np.full((n_classes, n_classes), 0.02 / n_classes)
        for k in range(n_classes):
            transitions[k, rng.choice(n_classes, size=4, replace=False)] += 0.98 * rng.dirichlet(np.ones(4))
        self.transitions = np.cumsum(transitions / transitions.sum(1, keepdims=True), axis=1)
        share = np.bincount(word_class, weights=weights, minlength=n_classes)
        self.first_class = np.cumsum(share / share.sum())

    def sentences(self, n_sentences):
        """`n_sentences` lines, drawn for all sentences one position at a time."""
        rng = self.rng
        lengths = np.maximum(2, rng.lognormal(np.log(20.0), 0.5, size=n_sentences).astype(int))
        n_classes = len(self.members)
        classes = np.empty((n_sentences, lengths.max()), np.int64)
        classes[:, 0] = np.minimum(np.searchsorted(self.first_class, rng.random(n_sentences)), n_classes - 1)
        for t in range(1, lengths.max()):
            u = rng.random(n_sentences)[:, None]
            classes[:, t] = np.minimum((u > self.transitions[classes[:, t - 1]]).sum(1), n_classes - 1)
        word_ids = np.empty_like(classes)
        for k, (ids, cumulative) in enumerate(zip(self.members, self.cumulative)):
            where = classes == k
            draws = np.searchsorted(cumulative, rng.random(int(where.sum())))
            word_ids[where] = ids[np.minimum(draws, ids.size - 1)]
        return [" ".join(self.words[word_ids[i, :n]]) + " ." for i, n in enumerate(lengths)]


def write_corpus(directory, n_tokens, n_heldout, n_shards, n_words, n_classes, zipf, min_count, seed):
    """Writes `train/shard_<i>.txt`, `heldout/heldout.txt` and `vocab.txt` (bilm's
    `build_vocab`, words seen fewer than `min_count` times left out); returns
    `(train glob, heldout glob, vocab file, training tokens)`."""
    chain = HiddenClassChain(n_words, n_classes, zipf, np.random.default_rng(seed))
    heldout = chain.sentences(n_heldout)
    train = []
    n_train = 0
    while n_train < n_tokens:
        batch = chain.sentences(max(1000, (n_tokens - n_train) // 20))
        train += batch
        n_train += sum(len(line.split()) for line in batch)
    write_shards(directory, [(False, line) for line in train] + [(True, line) for line in heldout], n_shards)
    train_glob = os.path.join(directory, "train", "*.txt")
    vocab_file = os.path.join(directory, "vocab.txt")
    build_vocab(train_glob, vocab_file, min_count=min_count)
    return train_glob, os.path.join(directory, "heldout", "*.txt"), vocab_file, n_train


# --- Training with a record of every step ---------------------------------------------------


class RecordingTrainStep(ArrayTrainStep):
    """The training step (`ArrayTrainStep`) that records each step's
    per-direction loss and, after the steps in `eval_steps`, the held-out
    loss of the weights reached, started both ways (`heldout_losses`). Set
    the class attributes before `train` builds it."""

    heldout = None
    eval_steps = frozenset()
    losses = []
    evaluations = {}

    def __call__(self, state, batch, step):
        state, metrics = super().__call__(state, batch, step)
        type(self).losses.append([float(metrics[d]) for d in self.directions])
        if step + 1 in self.eval_steps:
            type(self).evaluations[step + 1] = heldout_losses(self, state, self.heldout)
        return state, metrics


def heldout_losses(step, state, heldout, rows=256):
    """`{"zeros": [fwd, bwd], "training states": [fwd, bwd]}` mean held-out losses of `state` (one step per
    batch, states carried).

    "zeros" is bilm's evaluation (`evaluate_starts`, as bilm-tf's `test`):
    every row starts from zero states. "training states": the same, with
    the rows starting from the training stream's current LSTM states (tiled
    to `rows`); see the module docstring for why both.
    """
    tiled = {}
    for key, value in state["lstm"].items():
        value = keras.ops.convert_to_numpy(value)
        tiled[key] = np.tile(value, (rows // value.shape[0] + 1, 1))[:rows]
    losses = {}
    for name, first in (("zeros", None), ("training states", tiled)):
        metrics = evaluate_starts(step, state, heldout, ("carry",), rows, first_states=first)["carry"]
        losses[name] = [math.log(metrics[f"{d}_perplexity"]) for d in step.directions]
    return losses


def recurrent_kernels_copied_from_input_kernels():
    """ABLATION (recipe shared_lstm_init): inside the block, every
    ProjectedLSTM built starts with W_h equal to W_x's first rows, as
    bilm's code did before issue 28."""
    build = ProjectedLSTM.build

    def shared_build(self, input_shape):
        build(self, input_shape)
        input_kernel = self.input_kernel.numpy()
        rows = self.recurrent_kernel.shape[0]
        # A stateless draw with one seed: the longer draw starts with the shorter one.
        kernel = np.resize(input_kernel.ravel(), rows * input_kernel.shape[1]).reshape(rows, -1)
        self.recurrent_kernel.assign(kernel)

    return mock.patch.object(ProjectedLSTM, "build", shared_build)


RECIPES = ("bilm", "adam", "shared_lstm_init", "twin_backward")


def small_options(args, n_tokens_vocab):
    """The configuration of docs/learning_parity.md: `common.REFERENCE_MODEL`, its LSTM's sizes from the flags."""
    return {
        "bidirectional": True,
        "char_cnn": REFERENCE_MODEL["char_cnn"],
        "lstm": {**REFERENCE_MODEL["lstm"], "dim": args.lstm_dim, "projection_dim": args.projection_dim},
        "dropout": args.dropout,
        "all_clip_norm_val": 10.0,
        "learning_rate": 0.2,
        "n_epochs": 1,
        # One epoch is exactly --steps batches: every batch is new text.
        "n_train_tokens": args.steps * args.batch_size * args.unroll_steps,
        "batch_size": args.batch_size,
        "unroll_steps": args.unroll_steps,
        "sample_softmax": args.softmax == "sampled",
        "n_negative_samples_batch": args.n_negative,
        "n_tokens_vocab": n_tokens_vocab,
    }


def train_one(args, corpus, recipe, seed):
    """One run of `recipe`: `{"train": (steps, 2) losses, "heldout": {step: [fwd, bwd]}, "seconds"}`."""
    train_glob, heldout_glob, vocab_file, _ = corpus
    options = small_options(args, sum(1 for line in open(vocab_file, encoding="utf-8") if line.strip()))
    if recipe == "adam":
        options.update(optimizer="adam", learning_rate=args.adam_learning_rate)
    data, _ = load_training_data(options, train_glob, vocab_file, seed=seed)
    if recipe == "twin_backward":
        # ABLATION, not bilm's recipe: the backward stream reads the forward stream's sentences, reversed.
        data.backward = LMDataset(train_glob, data.vocab, reverse=True, shuffle_on_load=True, seed=data.forward.seed)
    heldout, _ = load_training_data(options, heldout_glob, vocab_file, test=True)
    RecordingTrainStep.heldout = heldout
    RecordingTrainStep.eval_steps = frozenset(
        range(args.steps, args.steps - args.eval_window - 1, -args.eval_every))
    RecordingTrainStep.losses, RecordingTrainStep.evaluations = [], {}
    started = time.perf_counter()
    init = recurrent_kernels_copied_from_input_kernels() if recipe == "shared_lstm_init" else contextlib.nullcontext()
    with init, tempfile.TemporaryDirectory() as save_dir:
        loop.train(options, data, 1, save_dir, None, seed=seed, verbose=0)
    return {"train": np.array(RecordingTrainStep.losses), "heldout": dict(RecordingTrainStep.evaluations),
            "seconds": time.perf_counter() - started}


MEASURES = ("train", "held-out, training states", "held-out, zeros", "held-out last, zeros")


def measures(run, train_window):
    """`{measure: (2,) mean losses per direction}` of one run (see `MEASURES`)."""
    steps = sorted(run["heldout"])
    training_states = np.array([run["heldout"][step]["training states"] for step in steps])
    zeros = np.array([run["heldout"][step]["zeros"] for step in steps])
    return {"train": run["train"][-train_window:].mean(0), "held-out, training states": training_states.mean(0),
            "held-out, zeros": zeros.mean(0), "held-out last, zeros": zeros[-1]}


def summary_lines(per_seed, seeds):
    lines = []
    for name in MEASURES:
        values = np.array([per_seed[seed][name] for seed in seeds])  # (seeds, directions)
        for d, direction in enumerate(("forward", "backward")):
            column = values[:, d]
            spread = column.std(ddof=1) if len(column) > 1 else float("nan")
            lines.append(f"  {name:26s} {direction:8s} loss {column.mean():.4f} sd {spread:.4f}  "
                         f"ppl {math.exp(column.mean()):9.2f}   seeds: "
                         + " ".join(f"{math.exp(v):.2f}" for v in column))
    return lines


def main(argv=None):
    parser = harness.parser(__doc__, steps=300, batch_size=32, unroll_steps=20, n_negative=1024, lstm_dim=256,
                            projection_dim=64, output=None, overwrite=True)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, one run each")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--softmax", choices=("full", "sampled"), default="full",
                        help="softmax in training (full: the negatives play no part)")
    parser.add_argument("--recipes", default="bilm,shared_lstm_init",
                        help="comma-separated recipes to compare, each with every seed: " + ", ".join(RECIPES)
                        + " (all but bilm are ablations, see above)")
    parser.add_argument("--adam_learning_rate", type=float, default=0.002, help="of the adam recipe")
    parser.add_argument("--train_window", type=int, default=100, help="last steps whose training loss is averaged")
    parser.add_argument("--eval_every", type=int, default=25, help="steps between held-out evaluations")
    parser.add_argument("--eval_window", type=int, default=100,
                        help="held-out evaluations at the last step and every --eval_every steps before it, "
                             "this many steps back")
    parser.add_argument("--corpus_tokens", type=int, default=1_000_000, help="training tokens to generate")
    parser.add_argument("--heldout_sentences", type=int, default=1500)
    parser.add_argument("--n_words", type=int, default=12000, help="made-up word types (before min_count)")
    parser.add_argument("--classes", type=int, default=48, help="hidden classes of the corpus")
    parser.add_argument("--zipf", type=float, default=1.05, help="Zipf exponent of the word frequencies")
    parser.add_argument("--min_count", type=int, default=2, help="vocabulary: fewest occurrences of a kept word")
    parser.add_argument("--corpus_seed", type=int, default=0)
    parser.add_argument("--train_prefix", help="train on these shards (glob) instead of a generated corpus; "
                                               "with --heldout_prefix and --vocab_file")
    parser.add_argument("--heldout_prefix", help="held-out shards (glob), with --train_prefix")
    parser.add_argument("--vocab_file", help="vocabulary, with --train_prefix")
    parser.add_argument("--corpus_dir", help="write the corpus here (default: a temporary directory)")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads (intra- and inter-op)")
    args = parser.parse_args(argv)
    harness.check_output(args.output, args.overwrite)
    seeds = [int(s) for s in args.seeds.split(",")]
    recipes = args.recipes.split(",")
    unknown = sorted(set(recipes) - set(RECIPES))
    if unknown:
        parser.error(f"unknown recipe(s) {unknown}: choose from {', '.join(RECIPES)}")
    if args.train_prefix and not (args.heldout_prefix and args.vocab_file):
        parser.error("--train_prefix needs --heldout_prefix and --vocab_file")
    if not args.train_prefix and args.steps * args.batch_size * args.unroll_steps > args.corpus_tokens:
        parser.error("--corpus_tokens must exceed the tokens read (steps x batch_size x unroll_steps), so that "
                     "every batch is new text")
    if args.train_window > args.steps or args.eval_window >= args.steps:
        parser.error("the windows must lie inside the run (--train_window <= --steps, --eval_window < --steps)")
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    # Instrumentation for this process only: train() builds its step from this name.
    training_run.ArrayTrainStep = RecordingTrainStep

    with tempfile.TemporaryDirectory() as tmp:
        directory = args.corpus_dir or tmp
        if args.train_prefix:
            n_train = sum(len(line.split()) for path in glob.glob(args.train_prefix) for line in open(path))
            corpus = (args.train_prefix, args.heldout_prefix, args.vocab_file, n_train)
        else:
            corpus = write_corpus(directory, args.corpus_tokens, args.heldout_sentences, 10, args.n_words,
                                  args.classes, args.zipf, args.min_count, args.corpus_seed)
        n_vocab = sum(1 for line in open(corpus[2], encoding="utf-8") if line.strip())
        print(f"corpus: {corpus[0]}, {corpus[3]:,} training tokens, vocabulary {n_vocab:,}; held-out unigram "
              f"perplexity {unigram_perplexity(corpus[1], corpus[2]):.1f}")
        print(f"settings: {args.steps} steps of {args.batch_size} x {args.unroll_steps}, LSTM 2 x {args.lstm_dim} "
              f"projected to {args.projection_dim}, dropout {args.dropout}, {args.softmax} softmax"
              + (f" ({args.n_negative} negatives)" if args.softmax == "sampled" else ""), flush=True)
        runs, per_seed = {}, {}
        for recipe in recipes:
            for seed in seeds:
                run = train_one(args, corpus, recipe, seed)
                runs[recipe, seed], per_seed[recipe, seed] = run, measures(run, args.train_window)
                m = per_seed[recipe, seed]
                print(f"{recipe} seed {seed}: " + " | ".join(f"{name} fwd {m[name][0]:.4f} bwd {m[name][1]:.4f}"
                                                             for name in MEASURES[:3])
                      + f" ({run['seconds']:.0f} s)", flush=True)
    print(f"\nOver seeds {seeds} (train: last {args.train_window} steps; held-out: steps "
          f"{sorted(runs[recipes[0], seeds[0]]['heldout'])}):")
    for recipe in recipes:
        print(recipe + ":")
        print("\n".join(summary_lines({seed: per_seed[recipe, seed] for seed in seeds}, seeds)))
    print("\n| recipe | held-out perplexity, forward | backward | both | sd (nats) |")
    print("| --- | --- | --- | --- | --- |")
    for recipe in recipes:
        losses = np.array([per_seed[recipe, seed]["held-out, training states"] for seed in seeds])
        both = losses.mean(1)
        spread = both.std(ddof=1) if len(both) > 1 else float("nan")
        print(f"| {recipe} | {math.exp(losses[:, 0].mean()):.2f} | {math.exp(losses[:, 1].mean()):.2f} | "
              f"{math.exp(both.mean()):.2f} | {spread:.4f} |")
    if args.output:
        harness.write_report({"args": vars(args), "runs": [
            {"recipe": recipe, "seed": seed, "train": run["train"].tolist(),
             "heldout": {str(step): value for step, value in run["heldout"].items()}, "seconds": run["seconds"]}
            for (recipe, seed), run in runs.items()]}, args.output, args.overwrite)


if __name__ == "__main__":
    sys.exit(main())
