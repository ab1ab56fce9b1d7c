#!/usr/bin/env python
"""Training throughput of the small released configuration, at two vocabulary sizes.

2x1024_128_2048cnn_1xhighway, bidirectional, char inputs, batch 64 x 20,
8192 negative samples, on a synthetic Zipfian corpus. Prints the steady-state
training tokens/sec (forward-stream tokens per second), the peak resident
memory, and this machine's float32 matmul rate measured in the same run. The
sampled softmax's gradients are sparse, so the 10k and the 800k vocabulary
should train at about the same speed.

It also prints a ceiling: the tokens/sec of a step whose every matmul ran
at the measured matmul rate, except the recurrences, whose step-by-step
matmuls are timed on their own (forward, and the same again for the
backward pass), since no implementation can beat them. Elementwise work,
gathers and the optimizer are counted as free, so the ceiling is generous.

Like `bin/train_elmo.py` (`train(tune_malloc=True)`), it first calls `keep_freed_memory` (glibc
keeps freed memory for the next step instead of returning it to the
kernel); `--default_malloc` leaves glibc's settings alone, to show the
difference.

Each vocabulary size trains twice, side by side: the step as graph ops
(XLA only where bilm compiles a part of it) and the step compiled whole
with XLA (the training key `jit_compile`; `--jit_compile` picks one). The
warm-up steps include the compilation.

Quick run: python bench/bench_train.py --steps 5 --warmup 2 --batch_size 8 \\
    --lstm_dim 64 --projection_dim 16 --filter_scale 16 --n_negative 512
"""
import argparse
import gc
import os
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (  # noqa: E402
    char_convolution_flops_per_token,
    encoder_flops_per_token,
    forward_flops_per_token,
    matmul_rate,
    peak_rss_gib,
    recurrent_matmul_seconds,
)

from bilm.ops.kernel_dtypes import MATMUL_DTYPES  # noqa: E402
from bilm.optimizers.adagrad import SparseAdagrad  # noqa: E402
from bilm.presets import TRAINING_DEFAULTS, get_preset  # noqa: E402
from bilm.training.config.settings import training_settings  # noqa: E402
from bilm.training.data.tf_dataset import make_tf_dataset  # noqa: E402
from bilm.training.model.training_lm import TrainingLM  # noqa: E402
from bilm.training.run.from_files import load_training_data  # noqa: E402
from bilm.training.run.train_step import TrainStep  # noqa: E402
from bilm.utils.malloc_tuning import keep_freed_memory  # noqa: E402

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def word(index):
    """The shortest base-26 spelling of `index`, distinct for every index."""
    letters = []
    index += 1
    while index:
        index, digit = divmod(index - 1, 26)
        letters.append(LETTERS[digit])
    return "".join(reversed(letters))


def made_up_words(n_vocab, rng):
    """`n_vocab` distinct made-up words, in frequency-rank order, with
    English-like lengths: frequent words short, rare ones longer (about
    4.6 letters per running token; the longest in a batch of 1280 tokens
    13-15). Word length sets the char CNN's work on a batch."""
    ranks = np.arange(n_vocab)
    targets = np.clip(np.round(rng.normal(2.5 + 1.3 * np.log10(ranks + 1), 2.0)), 1, 20).astype(int)
    filler = np.array(list(LETTERS))[rng.integers(26, size=(n_vocab, 20))]
    words, seen = [], set()
    for rank in ranks:
        spelled = word(rank)
        candidate = spelled + "".join(filler[rank, :max(0, targets[rank] - len(spelled))])
        while candidate in seen:
            candidate += LETTERS[rng.integers(26)]
        seen.add(candidate)
        words.append(candidate)
    return words


def write_corpus(directory, n_vocab, n_tokens, seed=0):
    """A Zipfian corpus over `n_vocab` words and its vocabulary (ids in frequency order)."""
    rng = np.random.default_rng(seed)
    ranks = (rng.zipf(1.2, size=n_tokens) - 1) % n_vocab
    words = made_up_words(n_vocab, rng)
    lines, position = [], 0
    while position < n_tokens:
        length = max(1, int(rng.normal(25, 5)))
        lines.append(" ".join(words[r] for r in ranks[position:position + length]))
        position += length
    train = os.path.join(directory, f"train_{n_vocab}.txt")
    with open(train, "w") as f:
        f.write("\n".join(lines) + "\n")
    vocab = os.path.join(directory, f"vocab_{n_vocab}.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(["<S>", "</S>", "<UNK>"] + words) + "\n")
    return train, vocab


def bench_options(args, n_tokens_vocab, jit_compile):
    options = get_preset(args.preset)
    options["char_cnn"]["n_characters"] = 261
    if args.lstm_dim:
        options["lstm"]["dim"] = args.lstm_dim
    if args.projection_dim:
        options["lstm"]["projection_dim"] = args.projection_dim
    options["char_cnn"]["filters"] = [[w, max(1, n // args.filter_scale)] for w, n in options["char_cnn"]["filters"]]
    options.update(TRAINING_DEFAULTS)
    options.update(batch_size=args.batch_size, unroll_steps=args.unroll_steps, n_tokens_vocab=n_tokens_vocab,
                   n_negative_samples_batch=args.n_negative, n_train_tokens=10 ** 9,
                   matmul_dtype=args.matmul_dtype, jit_compile=jit_compile)
    return options


def run(args, n_vocab, corpus, jit_compile):
    tokens_per_step = args.batch_size * args.unroll_steps
    train_file, vocab_file = corpus
    options = bench_options(args, n_vocab + 3, jit_compile)
    parsed, settings = training_settings(options)
    keras.utils.set_random_seed(0)  # both modes start from the same weights: their losses agree
    lm = TrainingLM(parsed, settings)
    optimizer = SparseAdagrad(lm.trainable_variables(), settings.learning_rate)
    states = {key: tf.Variable(tf.zeros([settings.batch_size, size])) for key, _, size in lm.state_keys}
    step = TrainStep(lm, optimizer, states, tf.distribute.get_strategy(), settings, seed=0)
    data, _ = load_training_data(options, train_file, vocab_file, seed=0)
    stream = make_tf_dataset(data, settings.batch_size, settings.unroll_steps, keys=lm.batch_keys())
    batches = list(stream.take(args.steps + args.warmup))

    start = time.perf_counter()
    for i, batch in enumerate(batches[:args.warmup]):
        float(step(batch, i)["loss"])
    warmup_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for i, batch in enumerate(batches[args.warmup:], start=args.warmup):
        loss = float(step(batch, i)["loss"])
    seconds = (time.perf_counter() - start) / args.steps
    if args.rate is None:
        # Measured after the timed steps: its large matmuls would raise
        # glibc's adaptive mmap threshold and so hide what --default_malloc
        # is there to show.
        args.rate = matmul_rate()
        print(f"float32 matmul: {args.rate / 1e9:,.1f} GFLOP/s on {tf.config.list_logical_devices()[-1].name}")
    ceiling = tokens_per_step / step_floor_seconds(parsed, settings, batches[args.warmup:], args.rate)
    n_bilm, n_softmax = lm.parameter_counts()
    flops = 3 * 2 * forward_flops_per_token(parsed) * tokens_per_step  # both directions, forward + backward
    dtype_note = "" if args.matmul_dtype == "float32" else f"[{args.matmul_dtype} matmuls; the ceiling is float32's] "
    mode = "compiled  " if step.jit_compile else "uncompiled"
    print(f"{dtype_note}{mode} vocab {n_vocab:>7,}: {tokens_per_step / seconds:10,.0f} tokens/sec  "
          f"{seconds * 1000:8.1f} ms/step  ~{flops / seconds / 1e9:8.1f} GFLOP/s (biLM only)  loss {loss:.3f}  "
          f"params {n_bilm:,} + softmax {n_softmax:,}  first {args.warmup} steps {warmup_seconds:.1f} s  "
          f"peak RSS so far {peak_rss_gib():.2f} GiB  (ceiling {ceiling:,.0f} tokens/sec)", flush=True)
    return tokens_per_step / seconds


def step_floor_seconds(options, settings, batches, rate):
    """The seconds of one training step if every matmul but the recurrences
    ran at `rate` FLOP/s and the recurrences took their per-step matmul time.

    Counts, for forward + backward (3x the forward multiply-adds): highway
    and projection on each batch's distinct tokens; the input half of every
    LSTM's gates; the sampled softmax's logits against the true and the
    sampled rows. The char convolutions are table lookups and their
    gradient bucket sums (see `bilm.ops.char_convolutions`), counted as free
    like other elementwise work. The
    recurrences (`(B, P) @ (P, 4U)` and the projection, every step) are
    timed by `recurrent_matmul_seconds`, twice for forward and backward,
    for each of the 2 x n_layers LSTMs.
    """
    rows, steps = settings.batch_size, settings.unroll_steps
    tokens = rows * steps
    # The encoder runs once per distinct token of both streams.
    distinct = np.mean([
        len(np.unique(np.concatenate([batch[key].numpy().reshape(tokens, -1)
                                      for key in ("token_characters", "token_characters_reverse")]), axis=0))
        for batch in batches])
    lstm, p = options.lstm_dim, options.projection_dim
    dense_encoder = encoder_flops_per_token(options) - char_convolution_flops_per_token(options)
    input_half = 2 * options.n_layers * 2 * p * 4 * lstm * tokens
    softmax = 2 * 2 * p * (settings.n_negative_samples_batch + 1) * tokens
    flops = 3 * (dense_encoder * distinct + input_half + softmax)
    recurrence = 2 * 2 * options.n_layers * recurrent_matmul_seconds(rows, steps, lstm, p)
    return flops / rate + recurrence


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab_sizes", default="10000,800000", help="comma-separated vocabulary sizes")
    parser.add_argument("--preset", default="small", help="released configuration (small = 2x1024_128_2048cnn)")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--unroll_steps", type=int, default=20)
    parser.add_argument("--n_negative", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (tracing)")
    parser.add_argument("--lstm_dim", type=int, help="shrink: LSTM size")
    parser.add_argument("--projection_dim", type=int, help="shrink: projection size")
    parser.add_argument("--filter_scale", type=int, default=1, help="shrink: divide every CNN filter count")
    parser.add_argument("--matmul_dtype", default="float32", choices=MATMUL_DTYPES,
                        help="bfloat16: the opt-in bfloat16 operands for the large matmuls (bilm.ops.matmul_dtype)")
    parser.add_argument("--jit_compile", choices=("both", "false", "true"), default="both",
                        help="train with the step uncompiled, compiled whole with XLA, or both side by side "
                             "(default: %(default)s)")
    parser.add_argument("--default_malloc", action="store_true",
                        help="leave glibc's malloc settings alone (bin/train_elmo.py applies keep_freed_memory); "
                             "the first vocabulary size shows the difference")
    args = parser.parse_args(argv)

    # As bin/train_elmo.py does; --default_malloc shows what it saves.
    tuned = not args.default_malloc and keep_freed_memory()
    print(f"malloc: {'freed memory kept for reuse (keep_freed_memory)' if tuned else 'glibc defaults'}")
    args.rate = None
    modes = {"both": (False, True), "false": (False,), "true": (True,)}[args.jit_compile]
    speeds = {}
    tokens_per_step = args.batch_size * args.unroll_steps
    with tempfile.TemporaryDirectory() as directory:
        for n_vocab in (int(v) for v in args.vocab_sizes.split(",")):
            corpus = write_corpus(directory, n_vocab, tokens_per_step * (args.steps + args.warmup + 2) * 2)
            for jit_compile in modes:
                speeds[n_vocab, jit_compile] = run(args, n_vocab, corpus, jit_compile)
                gc.collect()
            if len(modes) == 2:
                print(f"vocab {n_vocab:,}: compiled / uncompiled tokens/sec "
                      f"{speeds[n_vocab, True] / speeds[n_vocab, False]:.2f}", flush=True)
    vocab_sizes = sorted({n_vocab for n_vocab, _ in speeds})
    if len(vocab_sizes) > 1:
        small, large = vocab_sizes[0], vocab_sizes[-1]
        for jit_compile in modes:
            mode = "compiled" if jit_compile else "uncompiled"
            print(f"{mode}: tokens/sec ratio vocab {large:,} / vocab {small:,}: "
                  f"{speeds[large, jit_compile] / speeds[small, jit_compile]:.2f}")
    print(f"peak RSS {peak_rss_gib():.2f} GiB")
    return speeds


if __name__ == "__main__":
    main()
