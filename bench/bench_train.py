#!/usr/bin/env python
"""Training throughput on any Keras backend, through bilm's one training driver, at one or more vocabulary sizes.

Trains a preset (`--size`, the small released configuration by default:
2x1024_128_2048cnn_1xhighway, bidirectional, char inputs; `--token_inputs`: a token table) with
`bilm.training.train`, as `bin/train_elmo.py` does on every backend (the
data stream with its read-ahead, the backend's step, the loop's policies),
on a synthetic Zipfian corpus (`common.write_corpus`), batch `--batch_size` x
`--unroll_steps` (default: the preset's recipe, 128 x 20), `--n_negative`
sampled negatives, for `--warmup` untimed steps (tracing; on JAX the XLA
compilation) and `--steps` timed ones. The run stops after them, before
its end-of-run save. Each vocabulary size (`--vocab_sizes`, words; or
`--n_tokens_vocab`, the softmax's ids) trains once per `--jit_compile`
setting (the training key: `both` runs it uncompiled and compiled side by
side; JAX compiles and PyTorch runs eagerly whatever it says). For each
run it prints:

- tokens/sec: forward-stream tokens over the wall time from the end of the
  warm-up to the end of the last step (the stream and the policies
  included), and ms/step;
- the first step's seconds (on JAX also its XLA compilations, counted from
  JAX's own events; a compilation during the timed steps is warned of);
- TFLOP/s against the step's analytic FLOPs (`step_flops`);
- on a CPU, a ceiling: the tokens/sec of a step whose every matmul ran at
  this machine's rate for `--matmul_dtype` (`machine.matmul_rate`: float32
  by NumPy's BLAS, bfloat16 the faster of that and the backend's own
  bfloat16 product) except the float32 recurrences, whose step-by-step
  matmuls are timed on their own (`common.recurrent_matmul_seconds`, once
  forward and once backward), with the encoder counted on each batch's
  distinct tokens only and every elementwise op, gather and update free: a
  generous bound;
- the peak memory: host RSS and, on a GPU, the backend's own peak.

The sampled softmax's gradients are sparse rows, so a 10k and an 800k
vocabulary should train at about the same speed. Like `bin/train_elmo.py`
it first calls `keep_freed_memory` (glibc keeps freed memory for the next
step); `--default_malloc` leaves glibc alone. It keeps float32 matmuls in
float32 on a GPU unless `--tf32`; `--matmul_dtype bfloat16` is the faster
option. `--backend` (default: `KERAS_BACKEND`, else TensorFlow) sets
`KERAS_BACKEND` before Keras is imported; on JAX
and PyTorch TensorFlow is never imported, so the bench runs where only
they, NumPy, h5py and Keras are installed.

    python bench/bench_train.py --size small --vocab_sizes 10000,800000 --jit_compile both
    python bench/bench_train.py --backend jax --size original --n_tokens_vocab 793471 --steps 3 --warmup 1
    python bench/bench_train.py --backend torch --size tiny --batch_size 4 --steps 2 --warmup 1
"""
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from machine import device_peak_gib, machine_line, matmul_rate, peak_rss_gib  # noqa: E402

# As Keras itself: the backend of `KERAS_BACKEND` unless `--backend` names another.
DEFAULT_BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
BACKEND = harness.early_flag("backend", DEFAULT_BACKEND)
os.environ["KERAS_BACKEND"] = BACKEND  # before Keras is first imported, which fixes its backend
import keras  # noqa: E402
from common import encoder_flops_per_token, recurrent_matmul_seconds, timed_steps, write_corpus  # noqa: E402

from bilm.backend import backend_module  # noqa: E402
from bilm.optimizers import default_learning_rates  # noqa: E402
from bilm.presets import training_options  # noqa: E402
from bilm.training.config.settings import training_settings  # noqa: E402
from bilm.training.run import loop  # noqa: E402
from bilm.training.run.from_files import load_training_data  # noqa: E402

# JAX's monitoring event of one XLA compilation (jax._src.dispatch.BACKEND_COMPILE_EVENT).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def bench_options(args, n_tokens_vocab, jit_compile):
    """The training options of one run: the preset of `--size`, shrunk as the flags say, its recipe's training
    keys with the bench's batch, negatives, vocabulary, matmul dtype, optimizer and `jit_compile` (None: the
    key's default)."""
    options = training_options(args.size, unroll_steps=args.unroll_steps, n_tokens_vocab=n_tokens_vocab,
                               n_negative_samples_batch=args.n_negative, n_train_tokens=10 ** 9,
                               matmul_dtype=args.matmul_dtype, optimizer=args.optimizer)
    if args.lstm_dim:
        options["lstm"]["dim"] = args.lstm_dim
    if args.projection_dim:
        options["lstm"]["projection_dim"] = args.projection_dim
    if args.token_inputs:  # the preset's network on a token embedding table of the vocabulary's rows
        del options["char_cnn"]
    else:
        options["char_cnn"]["filters"] = [[w, max(1, n // args.filter_scale)]
                                          for w, n in options["char_cnn"]["filters"]]
    if args.batch_size:
        options["batch_size"] = args.batch_size
    if jit_compile is not None:
        options["jit_compile"] = jit_compile
    return options


_COMPILATIONS = {"log": None}  # where JAX's compilation events go: the running `timed_training`'s list of lists


def listen_to_compilations(log):
    """Appends the seconds of each XLA compilation on JAX to `log[-1]` from now on (one listener a process;
    PyTorch runs eagerly and TensorFlow's compilations are not counted)."""
    if BACKEND == "jax" and _COMPILATIONS["log"] is None:
        import jax

        jax.monitoring.register_event_duration_secs_listener(
            lambda event, seconds, **_: _COMPILATIONS["log"][-1].append(seconds)
            if event == BACKEND_COMPILE_EVENT else None)
    _COMPILATIONS["log"] = log


class _Timed(Exception):
    """Raised in place of the step after the last timed one: ends the run before its end-of-run work."""


def timed_training(options, train_file, vocab_file, n_steps):
    """Trains `n_steps` steps with `bilm.training.train` and returns `{"ends": each step's end (perf_counter),
    "first": the first step's seconds, "loss": the last step's, "chars": each batch's char ids by key, "counts":
    (biLM, softmax) parameters, "compiles": [[seconds of each XLA compilation] of each step] (JAX)}`."""
    record = {"compiles": [[]]}
    listen_to_compilations(record["compiles"])

    def before_step(steps):
        if len(steps) == n_steps:
            raise _Timed()
        if steps:
            record["compiles"].append([])

    try:
        with timed_steps(lambda run: record.update(counts=run.model.parameter_counts()), before_step, True) as steps, \
                tempfile.TemporaryDirectory(prefix="bench_train_run_") as save_dir:
            data, _ = load_training_data(options, train_file, vocab_file, seed=0)
            loop.train(options, data, 1, save_dir, None, seed=0, checkpoint_every=10 ** 9,
                       checkpoint_every_minutes=None, verbose=0)
    except _Timed:
        pass
    record.update(ends=[step["ended"] for step in steps], first=steps[0]["ended"] - steps[0]["begun"],
                  loss=steps[-1]["loss"], chars=[{key: ids for key, ids in step["batch"].items()
                                                  if key.startswith("token_characters") and ids is not None}
                                                 for step in steps])
    return record


def step_flops(options, settings):
    """The analytic FLOPs of one training step: 2 per multiply-add of its
    matmuls, the forward pass's count times 3 (the backward pass has two
    matmuls of the same size for each one of the forward pass).

    For each direction and each of its `batch_size * unroll_steps` tokens:
    the char CNN, highway and projection (`common.encoder_flops_per_token`:
    the convolutions as dense ones, a nominal count, since bilm encodes a
    batch's distinct tokens); each LSTM layer's `2 P 4U` (input half) +
    `2 P 4U` (recurrent half) + `2 U P` (projection, when `P != U`); the
    softmax, sampled `2 P (1 + n_negative)` or full `2 P n_tokens_vocab`.
    Elementwise work, gathers and the optimizer's update are not counted.
    Args: `BiLMOptions` and `TrainingSettings`."""
    u, p = options.lstm_dim, options.projection_dim
    per_token = encoder_flops_per_token(options) + options.n_layers * (2 * 2 * p * 4 * u + (2 * u * p if u != p else 0))
    per_token += 2 * p * (1 + settings.n_negative_samples_batch if settings.sample_softmax else settings.n_tokens_vocab)
    directions = 2 if settings.bidirectional else 1
    return 3 * directions * per_token * settings.batch_size * settings.unroll_steps


def step_floor_seconds(options, settings, distinct_tokens, rate):
    """The seconds of one training step if every matmul but the recurrences ran at `rate` FLOP/s and the
    recurrences took their step-by-step matmul time, with the encoder's dense layers on `distinct_tokens` (a
    batch's distinct tokens, both streams) and its convolutions, elementwise work, gathers and the optimizer
    free."""
    tokens = settings.batch_size * settings.unroll_steps
    dense_encoder = encoder_flops_per_token(options, convolutions=False)
    lstm, p = options.lstm_dim, options.projection_dim
    input_half = 2 * options.n_layers * 2 * p * 4 * lstm * tokens
    softmax = 2 * 2 * p * (settings.n_negative_samples_batch + 1) * tokens
    flops = 3 * (dense_encoder * distinct_tokens + input_half + softmax)
    recurrence = 2 * 2 * options.n_layers * recurrent_matmul_seconds(settings.batch_size, settings.unroll_steps,
                                                                     lstm, p)
    return flops / rate + recurrence


def significant(value, digits=3):
    """`value` in fixed notation with `digits` significant digits ("0.0000073", "41.2"), so a slow run's
    rate never prints as zero."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.1f}"
    return f"{value:.{max(1, digits - 1 - math.floor(math.log10(abs(value))))}f}"


def backend_device():
    """`(platform, kind)` of the first device the backend trains on (`training_devices` on JAX and PyTorch,
    TensorFlow's first GPU, else its CPU)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return "cpu", "CPU:0"
        return "gpu", tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU:0")
    device = backend_module("training_ops").training_devices(0)[0]
    platform = getattr(device, "platform", None) or device.type  # JAX's platform, PyTorch's device type
    return platform, getattr(device, "device_kind", None) or str(device)


def distinct_tokens(chars):
    """The mean number of distinct tokens (rows of char ids) of a step's two streams over `chars`, the steps'
    `{key: (batch, time, max_chars)}` char ids (0 for a token model: none)."""
    if not any(chars):
        return 0
    return np.mean([len(np.unique(np.concatenate([keras.ops.convert_to_numpy(ids).reshape(-1, ids.shape[-1])
                                                  for ids in step.values()]), axis=0)) for step in chars])


def report(args, n_vocab, jit_compile, record, settings, parsed, platform):
    """Prints one run's figures (`timed_training`'s `record`); returns its tokens/sec."""
    tokens_per_step = settings.batch_size * settings.unroll_steps
    total = record["ends"][-1] - record["ends"][args.warmup - 1]
    seconds = total / args.steps
    late = [seconds for step in record["compiles"][args.warmup:len(record["ends"])] for seconds in step]
    if late:
        print(f"WARNING: {len(late)} XLA compilation(s) ({sum(late):.1f} s) during the timed steps: the step was "
              "compiled again", flush=True)
    flops = step_flops(parsed, settings)
    tflops = flops * args.steps / total / 1e12
    rss, device_peak = peak_rss_gib(), device_peak_gib()
    n_bilm, n_softmax = record["counts"]
    ceiling = ""
    if platform == "cpu":
        if args.rate is None:  # after the first run's steps: its large products would move glibc's mmap threshold
            args.rate = matmul_rate(dtype=args.matmul_dtype)
            print(f"{args.matmul_dtype} matmul: {args.rate / 1e9:,.1f} GFLOP/s", flush=True)
        floor = step_floor_seconds(parsed, settings, distinct_tokens(record["chars"][args.warmup:]), args.rate)
        ceiling = f"  (ceiling {tokens_per_step / floor:,.0f} tokens/sec)"
    mode = {None: "", False: "uncompiled ", True: "compiled "}[jit_compile]
    dtype_note = "" if args.matmul_dtype == "float32" else f"[{args.matmul_dtype} matmuls] "
    print(f"{dtype_note}{mode}{BACKEND:<10} vocab {n_vocab:>7,}: {tokens_per_step / seconds:10,.0f} tokens/sec  "
          f"{seconds * 1000:8.1f} ms/step  ~{significant(tflops):>8} TFLOP/s (analytic step FLOPs)  "
          f"loss {record['loss']:.3f}  params {n_bilm:,} + softmax {n_softmax:,}  first step {record['first']:.1f} s  "
          f"peak RSS so far {rss:.2f} GiB" + ("" if device_peak is None else f"  device peak {device_peak:.2f} GiB")
          + ceiling, flush=True)
    print(f"tokens/sec: {tokens_per_step / seconds:,.0f} ({seconds * 1000:,.1f} ms/step, mean of {args.steps} steps "
          f"after {args.warmup} untimed, the data stream included)")
    print(f"compile time (first step): {record['first']:.2f} s (the first step's seconds: tracing, "
          f"{sum(record['compiles'][0]):.2f} s in {len(record['compiles'][0])} XLA compilation(s) from the start, "
          "and the step's run)")
    print(f"peak memory: host RSS {rss:.2f} GiB" + ("" if device_peak is None else
                                                     f", {platform} peak in use {device_peak:.2f} GiB"))
    print(f"TFLOP/s: {significant(tflops)} (analytic {flops / 1e9:,.3f} GFLOP per step, forward + backward, "
          f"x {args.steps} steps / {total:.2f} s)", flush=True)
    return tokens_per_step / seconds


def main(argv=None):
    parser = harness.parser(__doc__, backend=DEFAULT_BACKEND, size="small", batch_size=None, n_tokens_vocab=None,
                            unroll_steps=20, n_negative=8192, steps=20, warmup=3, lstm_dim=None, projection_dim=None,
                            matmul_dtype="float32", tf32=True)
    parser.add_argument("--vocab_sizes", type=harness.positive_ints,
                        help="comma-separated vocabulary sizes in words (default: 10000 on a CPU; on a GPU 793468, "
                             "the 1B Word Benchmark's 793,471 ids)")
    parser.add_argument("--optimizer", choices=sorted(default_learning_rates()), default="adagrad",
                        help="the optimizer, with its default learning rate (default: adagrad)")
    parser.add_argument("--token_inputs", action="store_true",
                        help="a token model: the preset without its char CNN, a token embedding table of the "
                             "vocabulary's rows (its gradient the rows a batch reads)")
    parser.add_argument("--filter_scale", type=int, default=1, help="shrink: divide every CNN filter count")
    parser.add_argument("--jit_compile", choices=("both", "false", "true"),
                        help="the training key jit_compile: false, true or both side by side (default: its default)")
    parser.add_argument("--deterministic", action="store_true",
                        help="deterministic GPU programs, as bin/train_elmo.py asks for (set_numerics(deterministic="
                             "True)); no effect on a CPU")
    parser.add_argument("--default_malloc", action="store_true",
                        help="leave glibc's malloc settings alone (bin/train_elmo.py applies keep_freed_memory)")
    args = parser.parse_args(argv)
    if args.backend != BACKEND:
        parser.error(f"this process imported the {BACKEND} side; --backend is read from the command line when "
                     "the script starts")
    if args.vocab_sizes and args.n_tokens_vocab:
        parser.error("give --vocab_sizes (words) or --n_tokens_vocab (ids), not both")
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1 (the first step traces or compiles)")
    from bilm.commands import set_numerics
    from bilm.utils.malloc_tuning import keep_freed_memory

    print(machine_line())
    # As bin/train_elmo.py: float32 stays float32 on a GPU unless --tf32; deterministic programs where asked.
    deterministic = set_numerics(tf32=args.tf32, deterministic=args.deterministic)
    print(f"float32 matmuls: {'TensorFloat-32 allowed (--tf32)' if args.tf32 else 'float32 (TF32 off)'}; "
          f"deterministic GPU programs: {'on' if deterministic else 'off'}")
    tuned = not args.default_malloc and keep_freed_memory()
    print(f"malloc: {'freed memory kept for reuse (keep_freed_memory)' if tuned else 'glibc defaults'}")
    platform, kind = backend_device()
    vocab_sizes = args.vocab_sizes or [(args.n_tokens_vocab or (10_003 if platform == "cpu" else 793_471)) - 3]
    modes = {None: (None,), "both": (False, True), "false": (False,), "true": (True,)}[args.jit_compile]
    args.rate, speeds = None, {}
    with tempfile.TemporaryDirectory(prefix="bench_train_") as directory:
        for n_vocab in vocab_sizes:
            parsed, settings = training_settings(bench_options(args, n_vocab + 3, None))
            tokens_per_step = settings.batch_size * settings.unroll_steps
            negatives = settings.n_negative_samples_batch if settings.sample_softmax else "no"
            print(f"{BACKEND} on {platform} ({kind}): size {args.size}, batch {settings.batch_size} x "
                  f"{settings.unroll_steps}, n_tokens_vocab {n_vocab + 3:,}, {negatives} negatives, "
                  f"{settings.matmul_dtype} matmuls, {settings.optimizer}", flush=True)
            corpus = write_corpus(directory, n_vocab, tokens_per_step * (args.warmup + args.steps + 2) * 2)
            for jit_compile in modes:
                options = bench_options(args, n_vocab + 3, jit_compile)
                record = timed_training(options, *corpus, args.warmup + args.steps)
                speeds[n_vocab, jit_compile] = report(args, n_vocab, jit_compile, record, settings, parsed, platform)
            if len(modes) == 2:
                print(f"vocab {n_vocab:,}: compiled / uncompiled tokens/sec "
                      f"{speeds[n_vocab, True] / speeds[n_vocab, False]:.2f}", flush=True)
    if len(vocab_sizes) > 1:
        small, large = min(vocab_sizes), max(vocab_sizes)
        for jit_compile in modes:
            print(f"{BACKEND}: tokens/sec ratio vocab {large:,} / vocab {small:,}: "
                  f"{speeds[large, jit_compile] / speeds[small, jit_compile]:.2f}")
    print(f"TensorFlow imported: {'yes' if 'tensorflow' in sys.modules else 'no'}", flush=True)
    return speeds


if __name__ == "__main__":
    main()
