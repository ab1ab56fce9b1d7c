"""Shared pieces of the benchmarks: machine matmul rate, peak memory, FLOP counts, text."""
import resource
import time

import numpy as np
import tensorflow as tf
from machine import machine_line


def matmul_rate(n=2048, repeats=5, trials=3):
    """Measured float32 matmul rate of this machine, in FLOP/s: the best of
    `trials` timings of `repeats` (n, n) matmuls, so that a slow start
    (clock ramping up, another process) does not lower it."""
    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    matmul = tf.function(lambda a, b: tf.matmul(a, b))
    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(repeats):
            matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 * repeats / best


def recurrent_matmul_seconds(batch, steps, units, output_dim, repeats=5, dtype="float32"):
    """Seconds for one LSTM's per-step matmuls alone over `steps` steps at
    this batch size (`(batch, P) @ (P, 4U)`, then `(batch, U) @ (U, P)` if
    projected), in a compiled loop: a floor under any recurrence, since each
    step needs the previous step's output. At small batches this is bound by
    streaming the kernels from memory rather than by arithmetic. `dtype`:
    the operands' (`"bfloat16"`: bfloat16 kernels, as bfloat16 inference)."""
    w_h, w_p = _recurrent_kernels(units, output_dim, dtype)

    @tf.function
    def loop(h):
        def body(t, h):
            m = tf.matmul(h, w_h)[:, :units]
            return t + 1, tf.matmul(m, w_p) if w_p is not None else m
        return tf.while_loop(lambda t, h: t < steps, body, (tf.constant(0), h))[1]

    return _seconds_per_call(loop, tf.cast(tf.random.normal([batch, output_dim]), w_h.dtype), repeats)


def packed_recurrent_matmul_seconds(rows_per_step, units, output_dim, repeats=5, dtype="float32"):
    """As `recurrent_matmul_seconds`, with `rows_per_step[t]` rows at step
    t: the floor of a recurrence that computes only the rows still inside
    their length (bilm's packed inference loop)."""
    w_h, w_p = _recurrent_kernels(units, output_dim, dtype)
    rows = tf.constant(rows_per_step, tf.int32)

    @tf.function
    def loop(h):
        def body(t, h):
            m = tf.matmul(h[:rows[t]], w_h)[:, :units]
            m = tf.matmul(m, w_p) if w_p is not None else m
            return t + 1, tf.concat([m, h[rows[t]:]], axis=0)
        return tf.while_loop(lambda t, h: t < tf.size(rows), body, (tf.constant(0), h),
                             shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, output_dim])))[1]

    h = tf.cast(tf.random.normal([max(rows_per_step, default=0), output_dim]), w_h.dtype)
    return _seconds_per_call(loop, h, repeats)


def _recurrent_kernels(units, output_dim, dtype):
    """Random `(P, 4U)` recurrent and `(U, P)` projection kernels (None
    without a projection) in `dtype`."""
    dtype = tf.as_dtype(dtype)
    w_h = tf.cast(tf.random.normal([output_dim, 4 * units], stddev=0.01), dtype)
    w_p = tf.cast(tf.random.normal([units, output_dim], stddev=0.01), dtype) if output_dim != units else None
    return w_h, w_p


def _seconds_per_call(loop, h, repeats):
    """Mean seconds of `loop(h)` over `repeats` calls, after one untimed (tracing) call."""
    loop(h).numpy()
    start = time.perf_counter()
    for _ in range(repeats):
        loop(h).numpy()
    return (time.perf_counter() - start) / repeats


def peak_rss_gib():
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def char_convolution_flops_per_token(options):
    """Multiply-adds x 2 of one token through the char CNN's convolutions."""
    if options.char_cnn is None:
        return 0
    cnn = options.char_cnn
    chars, dim = cnn.max_characters_per_token, cnn.embedding_dim
    return sum(2 * (chars - w + 1) * w * dim * num for w, num in cnn.filters)


def encoder_flops_per_token(options):
    """Multiply-adds x 2 of one token through the char CNN, highway and projection."""
    if options.char_cnn is None:
        return 0
    f, p = options.char_cnn.n_filters, options.projection_dim
    flops = char_convolution_flops_per_token(options) + options.char_cnn.n_highway * 2 * 2 * f * f
    if f != p:
        flops += 2 * f * p
    return flops


def forward_flops_per_token(options):
    """Multiply-adds x 2 of one token through the biLM (char CNN counted per token)."""
    p = options.projection_dim
    per_layer = 2 * (p + p) * 4 * options.lstm_dim
    if p != options.lstm_dim:
        per_layer += 2 * options.lstm_dim * p
    return encoder_flops_per_token(options) + 2 * options.n_layers * per_layer


def zipf_sentences(n_sentences, mean_length=25, vocab_size=20000, seed=0):
    """Synthetic sentences of made-up words with Zipfian frequencies."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=rng.integers(2, 11))) for _ in range(vocab_size)]
    ranks = rng.zipf(1.2, size=n_sentences * mean_length * 2) % vocab_size
    sentences, pos = [], 0
    for _ in range(n_sentences):
        length = max(1, int(rng.normal(mean_length, 5)))
        sentences.append([words[r] for r in ranks[pos:pos + length]])
        pos += length
    return sentences


def run_sizes(script, run_one, description, default_sentences, default_batch,
              default_sizes="small,original"):
    """Parses `--sizes/--n_sentences/--batch_size` and runs `run_one(size,
    n_sentences, batch_size) -> dict` for each size in its own process (so
    each peak memory is its own). Yields `(size, result dict, args)`."""
    import argparse
    import json
    import subprocess
    import sys

    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=default_sizes, help="comma-separated presets")
    parser.add_argument("--n_sentences", type=int, default=default_sentences)
    parser.add_argument("--batch_size", type=int, default=default_batch)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.n_sentences, args.batch_size)))
        return
    print(machine_line(), flush=True)
    for size in args.sizes.split(","):
        out = subprocess.run(
            [sys.executable, script, "--one", size, "--n_sentences", str(args.n_sentences),
             "--batch_size", str(args.batch_size)], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{size}: the benchmark failed:\n{out.stderr[-3000:]}")
        yield size, json.loads(out.stdout.strip().splitlines()[-1]), args
