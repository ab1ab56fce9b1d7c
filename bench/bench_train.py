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

On JAX and PyTorch (`--backend jax`, `--backend torch`): the array step of `bilm.training.arrays`
(`JaxTrainStep`, forward and backward pass, sampled softmax and optimizer
compiled as one XLA program) on whatever device JAX has, at one size
(`--size small|original|tiny`, the size's batch 128 x 20 unless
`--batch_size`/`--unroll_steps` say otherwise) and one vocabulary
(`--n_tokens_vocab`), on the same synthetic corpus and batches as the
TensorFlow bench. Prints tokens/sec, the first step's seconds (the
compilation), the peak memory (host RSS; on a GPU also JAX's
`peak_bytes_in_use`) and the TFLOP/s achieved against the step's analytic
FLOPs (`step_flops`). This path sets KERAS_BACKEND=jax before Keras is
imported and never imports TensorFlow, so it runs where only JAX, NumPy,
h5py and Keras are installed:

    python bench/bench_train.py --backend jax --size small --steps 20
    python bench/bench_train.py --backend jax --size original --n_tokens_vocab 793471 --steps 20
    python bench/bench_train.py --backend torch --size small --steps 20

As `bin/train_elmo.py`, it keeps float32 matmuls in float32 on a GPU unless
`--tf32` (on both backends); `--matmul_dtype bfloat16` is the faster option.
"""
import gc
import itertools
import math
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from machine import machine_line, peak_rss_gib  # noqa: E402


def requested_backend(argv=None):
    """The command line's `--backend` (default tensorflow), read before anything imports Keras, which fixes
    its backend at its first import."""
    return harness.early_flag("backend", "tensorflow", argv)


BACKEND = requested_backend()
if BACKEND in ("jax", "torch"):
    os.environ["KERAS_BACKEND"] = BACKEND
    import keras

    from bilm.backend import training_ops
    from bilm.training.arrays.train_step import JaxTrainStep
    from bilm.training.data.lm_dataset import load_training_data
else:
    import keras
    import tensorflow as tf
    from common import (
        char_convolution_flops_per_token,
        encoder_flops_per_token,
        forward_flops_per_token,
        recurrent_matmul_seconds,
    )
    from machine import matmul_rate

    from bilm.optimizers.adagrad import SparseAdagrad
    from bilm.training.run.from_files import load_training_data
    from bilm.training.tensorflow.tf_dataset import make_tf_dataset
    from bilm.training.tensorflow.train_step import TrainStep
    from bilm.training.tensorflow.training_lm import TrainingLM

from bilm.commands import set_numerics  # noqa: E402
from bilm.optimizers import default_learning_rates  # noqa: E402
from bilm.presets import TRAINING_DEFAULTS, get_preset  # noqa: E402
from bilm.training.config.settings import training_settings  # noqa: E402
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
    options = get_preset(args.size)
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
    # Each direction encodes its own input stream; forward_flops_per_token already holds both directions'
    # LSTMs (and one encoder). Forward + backward pass: 3x.
    flops = 3 * (forward_flops_per_token(parsed) + encoder_flops_per_token(parsed)) * tokens_per_step
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


def step_flops(options, settings):
    """The analytic FLOPs of one training step: 2 per multiply-add of its
    matmuls, the forward pass's count times 3 (the backward pass has two
    matmuls of the same size for each one of the forward pass).

    For each direction and each of its `batch_size * unroll_steps` tokens
    (the char CNN and the highway on every token, the convolutions as dense
    ones: a nominal count, since bilm computes them as table lookups, and
    TensorFlow's uncompiled step encodes a batch's distinct tokens only):

    - char CNN: `2 (max_characters - w + 1) w E n` for each filter of
      width `w` and `n` channels (`E`: the character embedding's size);
    - highway: `2 * 2 F^2` per layer (transform and gate; `F`: the CNN's
      filters), and the projection to the LSTM's input, `2 F P` when
      `F != P`;
    - each LSTM layer: `2 P 4U` (input half of the gates) + `2 P 4U`
      (recurrent half) + `2 U P` (the cell's projection, when `P != U`);
    - the softmax: sampled, `2 P (1 + n_negative)` (the row's true logit
      and the batch's shared negatives); full, `2 P n_tokens_vocab`.

    Elementwise work (activations, cell updates, clipping, exponentials),
    gathers and the optimizer's update are not counted. Args: `BiLMOptions`
    and `TrainingSettings`.
    """
    u, p = options.lstm_dim, options.projection_dim
    per_token = 0
    cnn = options.char_cnn
    if cnn is not None:
        chars, dim, f = cnn.max_characters_per_token, cnn.embedding_dim, cnn.n_filters
        per_token += sum(2 * (chars - w + 1) * w * dim * n for w, n in cnn.filters)
        per_token += cnn.n_highway * 2 * 2 * f * f + (2 * f * p if f != p else 0)
    per_token += options.n_layers * (2 * 2 * p * 4 * u + (2 * u * p if u != p else 0))
    if settings.sample_softmax:
        per_token += 2 * p * (1 + settings.n_negative_samples_batch)
    else:
        per_token += 2 * p * settings.n_tokens_vocab
    directions = 2 if settings.bidirectional else 1
    return 3 * directions * per_token * settings.batch_size * settings.unroll_steps


def significant(value, digits=3):
    """`value` in fixed notation with `digits` significant digits ("0.0000073", "41.2"), so a slow run's
    rate never prints as zero."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.1f}"
    return f"{value:.{max(1, digits - 1 - math.floor(math.log10(abs(value))))}f}"


def device_peak_gib(device):
    """The backend's peak bytes in use on `device` in GiB (JAX's `peak_bytes_in_use`, PyTorch's
    `max_memory_allocated`), None where it keeps no such count (the CPU)."""
    if BACKEND == "torch":
        import torch

        return torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else None
    try:
        stats = device.memory_stats()
    except Exception:  # a platform without memory statistics
        return None
    return stats["peak_bytes_in_use"] / 2 ** 30 if stats and "peak_bytes_in_use" in stats else None


def default_n_tokens_vocab(device):
    """The 1B Word Benchmark's 793,471 ids (the original model's) on a GPU or TPU; on the CPU 10,003 (10,000
    words and <S>, </S>, <UNK>, the TensorFlow bench's first vocabulary), which sets up faster. The sampled
    softmax reads a step's sampled rows alone, so the vocabulary changes the memory more than the speed."""
    return 10_003 if _platform(device) == "cpu" else 793_471


def _platform(device):
    """`"cpu"`, `"gpu"`, `"cuda"`, ...: a JAX device's platform or a PyTorch device's type."""
    return getattr(device, "platform", None) or device.type


def _ready(tree):
    """Waits for the backend's work on `tree` (JAX dispatches asynchronously; PyTorch on a GPU too)."""
    if BACKEND == "jax":
        import jax

        return jax.block_until_ready(tree)
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return tree


def _listen_to_compilations(compiles):
    """Appends the seconds of each XLA compilation to `compiles` (JAX's monitoring events; PyTorch runs the
    step eagerly, with nothing to compile)."""
    if BACKEND == "jax":
        import jax

        jax.monitoring.register_event_duration_secs_listener(
            lambda event, seconds, **_: compiles.append(seconds) if event == BACKEND_COMPILE_EVENT else None)


# JAX's monitoring event of one XLA compilation (jax._src.dispatch.BACKEND_COMPILE_EVENT).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def run_array_step(args):
    """Trains `args.warmup + args.steps` steps of the array step (`JaxTrainStep`, on JAX or PyTorch) on the
    backend's first device and prints its speed, first step (compilation on JAX), peak memory and TFLOP/s
    against `step_flops`. Returns tokens/sec."""
    device = training_ops().training_devices(0)[0]
    n_tokens_vocab = args.n_tokens_vocab or default_n_tokens_vocab(device)
    if args.batch_size is None:
        args.batch_size = TRAINING_DEFAULTS["batch_size"]
    options = bench_options(args, n_tokens_vocab, jit_compile=False)
    options.update(optimizer=args.optimizer, learning_rate=default_learning_rates()[args.optimizer])
    parsed, settings = training_settings(options)
    tokens_per_step = settings.batch_size * settings.unroll_steps
    n_batches = args.warmup + args.steps
    with tempfile.TemporaryDirectory() as directory:
        # The TensorFlow bench's corpus and data pipeline (NumPy), read once before any timing.
        train_file, vocab_file = write_corpus(directory, n_tokens_vocab - 3, tokens_per_step * (n_batches + 2) * 2)
        data, _ = load_training_data(options, train_file, vocab_file, seed=0)
        batches = list(itertools.islice(data.iter_batches(settings.batch_size, settings.unroll_steps), n_batches))
    # Not keras.utils.set_random_seed: it imports TensorFlow where it is installed, to seed it too. Without
    # it the biLM's initial weights differ from run to run (the softmax's and the step's draws do not).
    step = JaxTrainStep(parsed, settings, seed=0)
    batches = [step.placement.first({key: np.asarray(batch[key], np.int32) for key in step.batch_keys()})
               for batch in batches]
    state = _ready(step.initial_state())
    n_bilm = sum(math.prod(weight.shape) for weight in state["bilm"])
    n_softmax = sum(math.prod(weight.shape) for weight in state["softmax"].values())
    flops = step_flops(parsed, settings)
    kind = getattr(device, "device_kind", None) or str(device)
    print(f"{BACKEND} on {_platform(device)} ({kind}): size {args.size}, "
          f"batch {settings.batch_size} x {settings.unroll_steps}, n_tokens_vocab {n_tokens_vocab:,}, "
          f"{settings.n_negative_samples_batch if settings.sample_softmax else 'no'} negatives, "
          f"{settings.matmul_dtype} matmuls, {settings.optimizer}", flush=True)

    compiles = []  # (seconds of an XLA compilation), from JAX's monitoring events
    _listen_to_compilations(compiles)
    start = time.perf_counter()
    state, metrics = step(state, batches[0], 0)
    _ready((state, metrics))
    first_seconds = time.perf_counter() - start
    first_compiles = list(compiles)
    for i in range(1, args.warmup):
        state, metrics = step(state, batches[i], i)
    _ready((state, metrics))
    del compiles[:]
    start = time.perf_counter()
    for i in range(args.warmup, n_batches):
        state, metrics = step(state, batches[i], i)
    _ready((state, metrics))
    total = time.perf_counter() - start
    if compiles:
        print(f"WARNING: {len(compiles)} XLA compilation(s) ({sum(compiles):.1f} s) during the timed steps: "
              "the step was compiled again", flush=True)
    seconds = total / args.steps
    loss = float(metrics["loss"])
    rss, device_peak = peak_rss_gib(), device_peak_gib(device)
    tflops = flops * args.steps / total / 1e12
    dtype_note = "" if args.matmul_dtype == "float32" else f"[{args.matmul_dtype} matmuls] "
    print(f"{dtype_note}{BACKEND:<10} vocab {n_tokens_vocab - 3:>7,}: {tokens_per_step / seconds:10,.0f} tokens/sec  "
          f"{seconds * 1000:8.1f} ms/step  ~{significant(tflops):>8} TFLOP/s (analytic step FLOPs)  loss {loss:.3f}  "
          f"params {n_bilm:,} + softmax {n_softmax:,}  first step {first_seconds:.1f} s  "
          f"peak RSS so far {rss:.2f} GiB" + ("" if device_peak is None else
                                              f"  device peak {device_peak:.2f} GiB"), flush=True)
    print(f"tokens/sec: {tokens_per_step / seconds:,.0f} ({seconds * 1000:,.1f} ms/step, mean of {args.steps} steps "
          f"after {args.warmup} untimed)")
    print(f"compile time (first step): {first_seconds:.2f} s (the first step's seconds: tracing, "
          f"{sum(first_compiles):.2f} s in {len(first_compiles)} XLA compilation(s), and the step's run)")
    print(f"peak memory: host RSS {rss:.2f} GiB" + ("" if device_peak is None else
                                                     f", {_platform(device)} peak in use {device_peak:.2f} GiB"))
    print(f"TFLOP/s: {significant(tflops)} (analytic {flops / 1e9:,.3f} GFLOP per step, forward + backward, "
          f"x {args.steps} steps / {total:.2f} s)")
    print(f"TensorFlow imported: {'yes' if 'tensorflow' in sys.modules else 'no'}", flush=True)
    return tokens_per_step / seconds


def main(argv=None):
    parser = harness.parser(__doc__, backend="tensorflow", size="small", batch_size=None, n_tokens_vocab=None,
                            unroll_steps=20, n_negative=8192, steps=20, warmup=3, matmul_dtype="float32", tf32=True)
    parser.add_argument("--vocab_sizes", help="comma-separated vocabulary sizes (TensorFlow; default 10000,800000)")
    parser.add_argument("--optimizer", choices=sorted(default_learning_rates()),
                        help="JAX: adagrad (the default) or adam, with its default learning rate")
    parser.add_argument("--lstm_dim", type=int, help="shrink: LSTM size")
    parser.add_argument("--projection_dim", type=int, help="shrink: projection size")
    parser.add_argument("--filter_scale", type=int, default=1, help="shrink: divide every CNN filter count")
    parser.add_argument("--jit_compile", choices=("both", "false", "true"),
                        help="TensorFlow: train with the step uncompiled, compiled whole with XLA, or both side by "
                             "side (default: both)")
    parser.add_argument("--deterministic", action="store_true",
                        help="deterministic GPU programs, as bin/train_elmo.py asks for (set_numerics(deterministic="
                             "True): TensorFlow's op determinism, XLA's deterministic ops on JAX); no effect on a CPU")
    parser.add_argument("--default_malloc", action="store_true",
                        help="leave glibc's malloc settings alone (bin/train_elmo.py applies keep_freed_memory); "
                             "the first vocabulary size shows the difference")
    args = parser.parse_args(argv)
    if args.backend != BACKEND:
        parser.error(f"this process imported the {BACKEND} side; --backend is read from the command line when "
                     "the script starts")
    arrays = args.backend in ("jax", "torch")
    only = ("vocab_sizes", "jit_compile") if arrays else ("n_tokens_vocab", "optimizer")
    for name in only:
        if getattr(args, name) is not None:
            parser.error(f"--{name} is not for --backend {args.backend}")

    print(machine_line())
    # As bin/train_elmo.py: float32 stays float32 on a GPU unless --tf32; deterministic programs where asked.
    deterministic = set_numerics(tf32=args.tf32, deterministic=args.deterministic)
    print(f"float32 matmuls: {'TensorFloat-32 allowed (--tf32)' if args.tf32 else 'float32 (TF32 off)'}; "
          f"deterministic GPU programs: {'on' if deterministic else 'off'}")
    # As bin/train_elmo.py does; --default_malloc shows what it saves.
    tuned = not args.default_malloc and keep_freed_memory()
    print(f"malloc: {'freed memory kept for reuse (keep_freed_memory)' if tuned else 'glibc defaults'}")
    if arrays:
        if args.warmup < 1:
            parser.error(f"--warmup must be at least 1 on {args.backend} (the first step compiles or warms up)")
        args.optimizer = args.optimizer or "adagrad"
        return run_array_step(args)
    args.vocab_sizes = args.vocab_sizes or "10000,800000"
    args.jit_compile = args.jit_compile or "both"
    args.batch_size = args.batch_size or 64
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
