#!/usr/bin/env python
"""bilm on a GPU: what runs where, ELMo's numerics against the CPU, the Keras example, speed, and training's
reproducibility, in one run (sized for under 10 minutes on one GPU; `--quick`: under a minute on a 2-core CPU).

In order:
1. Devices and versions: Python, TensorFlow, Keras, bilm's git commit, the
   CUDA and cuDNN versions TensorFlow was built with, each GPU's name and
   compute capability.
2. `ELMo.embed` on the default device (the first GPU) against a reference
   computed on the CPU (`tf.device("/CPU:0")`, TF32 off), on a random model
   (`write_random_model(..., seed=0)`, small size) and fixed sentences: the
   largest relative deviation of any token's vector in any layer
   (`|device - cpu| / |cpu|`, Euclidean), against a tolerance, for float32
   with TF32 off (1e-5), TF32 on (about 1e-3 expected; 1e-2 allowed),
   `kernel_dtype="bfloat16"` (`BFLOAT16_INFERENCE_TOLERANCE`) and `"int8"`
   (`INT8_INFERENCE_TOLERANCE`).
3. The README's Keras example (an `ELMoEmbedding` under a BiLSTM tagger,
   compiled with Keras's default `jit_compile="auto"`, one `fit`, one
   `predict`), on string tokens and on `Batcher` char ids: whether Keras
   compiled it with XLA (expected on a GPU for ids, never for strings,
   whose string ops XLA cannot compile) and that it ran.
4. Timings (not checks): `ELMo.embed` tokens/sec at batch 1, 32 and 512
   (20-token random sentences, float32, TF32 off, token cache on as `embed`
   runs it, after one untimed batch), and 20 training steps
   (`bilm.training.train`, the preset's recipe on a generated corpus of
   about 300 words, 128 sampled negatives; the first step, which traces
   and compiles, untimed) with the step compiled with XLA and not (the
   training key `jit_compile`; `--quick`: its default); at the small and the original
   size (the original only on a GPU, or with `--original`).
5. Training's reproducibility (op determinism on where a GPU is visible,
   as `bin/train_elmo.py` turns it on): two runs with the same seed end
   with the same checkpoint, bit for bit, and a run stopped after N steps
   and restarted from its checkpoint to 2N ends as the uninterrupted 2N
   run, bit for bit (weights, optimizer state, LSTM states, data position).

It ends with one table (check, result, figure); the exit status is 0 when
every check passes, 1 otherwise. `--output PATH` writes the same, with the
environment, as JSON (atomically; an existing file only with `--overwrite`).
Without a GPU it says so and runs everything on the CPU, which is then
both the reference and the device.
"""
import contextlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import layer_deviations, model_files, random_model, timed_steps, zipf_sentences  # noqa: E402
from machine import clocked, device_peak_gib  # noqa: E402

import bilm  # noqa: E402
from bilm.commands.devices import describe_devices, set_numerics  # noqa: E402
from bilm.ops.kernel_dtypes import BFLOAT16_INFERENCE_TOLERANCE, INT8_INFERENCE_TOLERANCE  # noqa: E402
from bilm.presets import training_options  # noqa: E402
from bilm.training import BidirectionalLMDataset, load_vocab, train, write_sample_corpus  # noqa: E402

FLOAT32_TOLERANCE = 1e-5
# TF32 rounds matmul and convolution inputs to a 10-bit mantissa (2**-11 relative), a quarter of bfloat16's
# rounding: about 1e-3 expected where bfloat16 kernels give 0.3-1%.
TF32_TOLERANCE = 1e-2

SENTENCES = [
    "The cat sat on the mat .",
    "Hi",
    "ELMo gives every token a vector that depends on the whole sentence it is in .",
    "A GPU should give the same vectors as the CPU , up to round-off .",
]


def settings(args, on_gpu):
    """What to run: sizes, sentences and steps. `--quick` shrinks them all; without a GPU the original size is
    skipped unless `--original`. `embed_batches`: {batch size: timed batches}."""
    if args.quick:
        return dict(check_size="tiny", timing_sizes=["tiny"], skipped_sizes=[], embed_batches={1: 4, 4: 2, 16: 2},
                    length=10, train_steps=3, restart_steps=2,
                    train_keys=dict(batch_size=8, unroll_steps=5, n_negative_samples_batch=32))
    original = on_gpu or args.original
    return dict(check_size="small", timing_sizes=["small", "original"] if original else ["small"],
                skipped_sizes=[] if original else ["original"], embed_batches={1: 32, 32: 8, 512: 3}, length=20,
                train_steps=20, restart_steps=5, train_keys=dict(n_negative_samples_batch=128))


class Table:
    """The rows of the final table: checks (PASS or FAIL) and timings (not checks)."""

    def __init__(self):
        self.rows = []

    def check(self, name, passed, figure, **values):
        self._add(name, "check", "PASS" if passed else "FAIL", figure, values)

    def timing(self, name, figure, **values):
        self._add(name, "timing", "-", figure, values)

    def skipped(self, name, why):
        self._add(name, "timing", "skipped", why, {})

    def _add(self, name, kind, result, figure, values):
        self.rows.append(dict(name=name, kind=kind, result=result, figure=figure, **values))
        print(f"  {result:7} {name}: {figure}", flush=True)

    @contextlib.contextmanager
    def attempt(self, name):
        """Runs the block; an exception in it becomes a failed check `name` (its traceback on stderr)."""
        try:
            yield
        except Exception as error:  # whatever it is, the check failed; the next one runs
            traceback.print_exc()
            message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            self.check(name, False, f"error: {message}")

    @property
    def passed(self):
        return all(row["result"] == "PASS" for row in self.rows if row["kind"] == "check")

    def print(self):
        width = max(len(row["name"]) for row in self.rows)
        print(f"\n{'check':{width}}  {'result':7}  figure")
        for row in self.rows:
            print(f"{row['name']:{width}}  {row['result']:7}  {row['figure']}")
        failed = sum(row["result"] == "FAIL" for row in self.rows)
        print("\nall checks passed" if not failed else f"\n{failed} check(s) failed")


# === 1. Devices and versions ===

def environment():
    """Versions, TensorFlow's CUDA build, and what TensorFlow sees."""
    build = tf.sysconfig.get_build_info()
    gpus = []
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(gpu)
        except (ValueError, tf.errors.OpError):
            details = {}
        capability = details.get("compute_capability")
        gpus.append({"device": gpu.name, "name": details.get("device_name", "unknown"),
                     "compute_capability": ".".join(map(str, capability)) if capability else "unknown"})
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "bilm": _bilm_version(),
        "is_cuda_build": bool(build.get("is_cuda_build", False)),
        "cuda_version": build.get("cuda_version"),
        "cudnn_version": build.get("cudnn_version"),
        "gpus": gpus,
        "devices": describe_devices(),
    }


def _bilm_version():
    """bilm's installed version and the git commit of its checkout (`+` local changes), where there is one."""
    try:
        version = importlib.metadata.version("bilm")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    try:
        commit = subprocess.run(["git", "describe", "--always", "--dirty=+", "--abbrev=12"], capture_output=True,
                                text=True, timeout=10, cwd=os.path.dirname(bilm.__file__))
        if commit.returncode == 0 and commit.stdout.strip():
            return f"{version}, commit {commit.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{version} (no git checkout)"


def print_environment(env):
    if not env["gpus"]:
        print("no GPU found: running on the CPU (it is both the reference and the device below)")
    print(env["devices"])
    print(f"Python {env['python']} ({env['platform']}), TensorFlow {env['tensorflow']}, Keras {env['keras']}, "
          f"bilm {env['bilm']}")
    cuda = (f"CUDA {env['cuda_version']}, cuDNN {env['cudnn_version']}" if env["is_cuda_build"]
            else "built without CUDA")
    print(f"TensorFlow build: {cuda}")
    for gpu in env["gpus"]:
        print(f"{gpu['device']}: {gpu['name']}, compute capability {gpu['compute_capability']}")
    print(flush=True)


# === 2. ELMo.embed on the device against the CPU ===

def check_embedding(table, model_dir, size):
    """Each numerics' largest deviation from the CPU's float32 vectors."""
    sentences = SENTENCES + zipf_sentences(6, mean_length=25, seed=7)
    set_numerics(tf32=False)
    with tf.device("/CPU:0"):
        reference = bilm.load(model_dir, start="zeros").embed(sentences, layers="all", verbose=0)
    runs = [
        ("float32, TF32 off", "float32", False, FLOAT32_TOLERANCE, ""),
        ("TF32 on", "float32", True, TF32_TOLERANCE, "; about 1e-3 expected on a GPU, none on a CPU"),
        ("bfloat16 kernels", "bfloat16", False, BFLOAT16_INFERENCE_TOLERANCE, ""),
        ("int8 kernels", "int8", False, INT8_INFERENCE_TOLERANCE, ""),
    ]
    for label, kernel_dtype, tf32, tolerance, note in runs:
        name = f"embed {size}, {label}, vs CPU float32"
        with table.attempt(name):
            set_numerics(tf32=tf32)
            try:
                vectors = bilm.load(model_dir, start="zeros", kernel_dtype=kernel_dtype).embed(
                    sentences, layers="all", verbose=0)
            finally:
                set_numerics(tf32=False)
            deviation = max_relative_deviation(vectors, reference)
            table.check(name, deviation <= tolerance,
                        f"max relative deviation {deviation:.2e} (tolerance {tolerance:.0e}{note})",
                        value=deviation, tolerance=tolerance)


def max_relative_deviation(got, want):
    """The largest `|got - want| / |want|` of any token's vector in any layer (`common.layer_deviations`)."""
    return max(top for top, _ in layer_deviations(got, want))


# === 3. The README's Keras example ===

def check_keras(table, model_dir, size, on_gpu):
    """The tagger of README's "ELMo inside a Keras model", on string tokens and on char ids."""
    options_file, weight_file = model_files(model_dir)
    max_chars = bilm.load_options(options_file).char_cnn.max_characters_per_token
    sentences = [["The", "cat", "sat"], ["Hi"]]
    for input_kind in ("string tokens", "Batcher char ids"):
        name = f"Keras tagger {size}, {input_kind}"
        with table.attempt(name):
            keras.utils.set_random_seed(0)
            if input_kind == "string tokens":
                inputs = keras.Input(shape=(None,), dtype="string")
                x = tf.ragged.constant(sentences).to_tensor(default_value="")  # (2, 3)
            else:
                inputs = keras.Input(shape=(None, max_chars), dtype="int32")
                x = bilm.Batcher(None, max_chars).batch_sentences(sentences)  # (2, 5, max_chars)
            elmo = bilm.ELMoEmbedding.from_files(options_file, weight_file, output="elmo", start="zeros")(inputs)
            hidden = keras.layers.Bidirectional(keras.layers.LSTM(16, return_sequences=True))(elmo)
            tagger = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(hidden))
            tagger.compile("adam", "sparse_categorical_crossentropy")
            y = tf.constant([[0, 1, 2], [1, 0, 0]])
            loss = tagger.fit(x, y, epochs=1, verbose=0).history["loss"][-1]
            tags = tagger.predict(x, verbose=0)
            xla = bool(tagger.jit_compile)
            # Keras's "auto" compiles on a GPU machine unless a layer cannot be (text in) or op determinism is on.
            expected = on_gpu and input_kind != "string tokens"
            ran = tags.shape == (2, 3, 3) and bool(np.all(np.isfinite(tags))) and np.isfinite(loss)
            table.check(name, ran and xla == expected,
                        f"fit and predict ran ({'predictions (2, 3, 3)' if ran else f'bad output {tags.shape}'}, "
                        f"loss {loss:.3f}); XLA {'yes' if xla else 'no'} (expected {'yes' if expected else 'no'})",
                        xla=xla, expected_xla=expected)


# === 4. Timings ===

def time_embedding(table, model_dir, size, embed_batches, length, on_gpu):
    """`ELMo.embed` tokens/sec at each batch size, after one untimed batch (tracing)."""
    elmo = bilm.load(model_dir, start="zeros")
    for batch_size, n_batches in embed_batches.items():
        name = f"embed {size}, batch {batch_size}"
        with table.attempt(name):
            elmo.embed(zipf_sentences(batch_size, seed=1, lengths=(length, length)), layers="all",
                       batch_size=batch_size, verbose=0)
            sentences = zipf_sentences(batch_size * n_batches, seed=2, lengths=(length, length))
            reset_gpu_peak(on_gpu)
            _, seconds = clocked(lambda: elmo.embed(sentences, layers="all", batch_size=batch_size, verbose=0))
            rate = len(sentences) * length / seconds
            table.timing(name, f"{rate:,.0f} tokens/sec ({len(sentences)} sentences of {length} tokens, "
                               f"{seconds:.2f} s{gpu_peak(on_gpu)})", value=rate)


def reset_gpu_peak(on_gpu):
    if on_gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")


def gpu_peak(on_gpu):
    return f", GPU peak {device_peak_gib():.2f} GiB" if on_gpu else ""


class TrainingRuns:
    """`bilm.training.train` on the generated corpus, from the preset's recipe with `train_keys`; a run from
    scratch is kept, so that a later check may reuse an identical one (same size, `jit_compile`, steps)."""

    def __init__(self, corpus, train_keys, work_dir):
        self.corpus = corpus
        self.train_keys = train_keys
        self.work_dir = work_dir
        self.done = {}

    def options(self, size, jit_compile=None):
        keys = dict(self.train_keys, n_epochs=100)
        if jit_compile is not None:
            keys["jit_compile"] = jit_compile
        return training_options(size, **keys)

    def run(self, size, max_steps, jit_compile=None, restart=None, save_dir=None):
        """`train`'s result dict, plus `step_seconds`: each step's seconds."""
        data = BidirectionalLMDataset(self.corpus["train_prefix"], load_vocab(self.corpus["vocab_file"], 50),
                                      shuffle_on_load=True, seed=0)
        save_dir = save_dir or tempfile.mkdtemp(prefix=f"train_{size}_", dir=self.work_dir)
        with timed_steps() as steps:
            result = train(self.options(size, jit_compile), data, 1, save_dir, None, restart_ckpt_file=restart,
                           max_steps=max_steps, seed=0, verbose=0)
        # The first step alone, then from one step's end to the next's (the loop's work between them included).
        ends = [step["ended"] for step in steps]
        result["step_seconds"] = [ends[0] - steps[0]["begun"], *np.diff(ends).tolist()] if steps else []
        if restart is None:
            self.done.setdefault((size, jit_compile, max_steps), result)
        return result

    def done_or_run(self, size, max_steps):
        """The run of `size` with the default `jit_compile` to `max_steps`, made before or now."""
        return self.done.get((size, None, max_steps)) or self.run(size, max_steps)


def time_training(table, runs, size, n_steps, modes, on_gpu):
    """Tokens/sec of `n_steps` training steps after the first (which traces and compiles)."""
    for jit_compile in modes:
        mode = {None: "", False: ", step not compiled", True: ", step compiled (XLA)"}[jit_compile]
        name = f"train {size}{mode}"
        with table.attempt(name):
            reset_gpu_peak(on_gpu)
            seconds = runs.run(size, n_steps + 1, jit_compile)["step_seconds"]
            options = runs.options(size, jit_compile)
            tokens_per_step = options["batch_size"] * options["unroll_steps"]
            timed = seconds[1:]
            rate = tokens_per_step * len(timed) / sum(timed)
            table.timing(name, f"{rate:,.0f} tokens/sec ({len(timed)} steps of {options['batch_size']} x "
                               f"{options['unroll_steps']} tokens; first step {seconds[0]:.1f} s"
                               f"{gpu_peak(on_gpu)})", value=rate, first_step_seconds=seconds[0])


# === 5. Training's reproducibility ===

def checkpoint_arrays(path):
    """`{name: array}` of a training checkpoint's state (model, softmax, optimizer, LSTM states), its step and
    its data position."""
    from bilm.training.run import run_checkpoint

    meta = run_checkpoint.read_file_meta(path)
    arrays = {name: value for name, value in run_checkpoint.read_arrays(path).items()
              if not name.startswith(run_checkpoint.BOUNDARY_STATE_PREFIX)}
    return {**arrays, **{name: np.int64(meta[name] or 0) for name in ("step", "data_batches", "data_source")}}


def compare_checkpoints(got, want):
    """`(n differing arrays, largest absolute difference, n arrays)`, bit for bit."""
    if sorted(got) != sorted(want):
        raise ValueError(f"the checkpoints hold other variables: {sorted(set(got) ^ set(want))[:5]}")
    differing, largest = 0, 0.0
    for name in want:
        a, b = np.asarray(got[name]), np.asarray(want[name])
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            differing += 1
            if a.dtype.kind in "fiu" and a.shape == b.shape:
                largest = max(largest, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
            else:
                largest = float("inf")
    return differing, largest, len(want)


def check_reproducibility(table, runs, size, n):
    """Two seeded 2N-step runs alike, and N steps + a restart to 2N like the 2N run, bit for bit (the default
    `jit_compile`)."""
    name = f"train {size}, same seed twice: identical"
    with table.attempt(name):
        straight = runs.done_or_run(size, 2 * n)
        report_comparison(table, name, runs.run(size, 2 * n), straight, 2 * n)
    name = f"train {size}, {n} steps + restart to {2 * n}: as straight"
    with table.attempt(name):
        save_dir = tempfile.mkdtemp(prefix="restarted_", dir=runs.work_dir)
        first = runs.run(size, n, save_dir=save_dir)
        resumed = runs.run(size, n, restart=first["checkpoint"], save_dir=save_dir)
        report_comparison(table, name, resumed, runs.done_or_run(size, 2 * n), 2 * n)


def report_comparison(table, name, got, want, steps):
    differing, largest, total = compare_checkpoints(checkpoint_arrays(got["checkpoint"]),
                                                    checkpoint_arrays(want["checkpoint"]))
    at_step = got["step"] == want["step"] == steps
    figure = (f"{total} arrays bit for bit equal at step {got['step']}" if not differing
              else f"{differing} of {total} arrays differ, by up to {largest:.2e}")
    if not at_step:
        figure += f" (steps {got['step']} and {want['step']}, expected {steps})"
    table.check(name, at_step and not differing, figure, differing_arrays=differing, largest_difference=largest)


# === The run ===

@contextlib.contextmanager
def section(title):
    print(f"{title}:", flush=True)
    start = time.perf_counter()
    yield
    print(f"  ({time.perf_counter() - start:.1f} s)", flush=True)


def main(argv=None):
    parser = harness.parser(__doc__, output=None, overwrite=True, quick=True)
    parser.add_argument("--original", action="store_true",
                        help="time the original size without a GPU too (on a GPU it always runs)")
    args = parser.parse_args(argv)
    harness.check_output(args.output, args.overwrite)
    started = time.perf_counter()
    tf.get_logger().setLevel("ERROR")  # not tf.function's retracing notes: each model loaded traces its own
    env = environment()
    print_environment(env)
    on_gpu = bool(env["gpus"])
    plan = settings(args, on_gpu)
    table = Table()
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as work_dir:
        size = plan["check_size"]
        with section(f"ELMo.embed on the default device against the CPU ({size} random model)"):
            with table.attempt(f"embed {size}: random model"):
                check_embedding(table, random_model(work_dir, size), size)
        with section("The README's Keras example"):
            with table.attempt(f"Keras tagger {size}"):
                check_keras(table, random_model(work_dir, size), size, on_gpu)

        with section("Embedding speed (float32, TF32 off)"):
            for size in plan["timing_sizes"]:
                with table.attempt(f"embed {size}: random model"):
                    time_embedding(table, random_model(work_dir, size), size, plan["embed_batches"], plan["length"],
                                   on_gpu)
            for size in plan["skipped_sizes"]:
                table.skipped(f"embed {size}", "no GPU found: --original times it on the CPU")

        deterministic = set_numerics(tf32=False, deterministic=True)
        with section(f"Training (TF32 off, op determinism {'on' if deterministic else 'off: no GPU'}, "
                     "as bin/train_elmo.py)"):
            corpus = write_sample_corpus(os.path.join(work_dir, "corpus"), n_train_sentences=8000,
                                         n_heldout_sentences=10, n_shards=2)
            runs = TrainingRuns(corpus, plan["train_keys"], work_dir)
            for size in plan["timing_sizes"]:
                time_training(table, runs, size, plan["train_steps"], [None] if args.quick else [False, True], on_gpu)
            for size in plan["skipped_sizes"]:
                table.skipped(f"train {size}", "no GPU found: --original times it on the CPU")
        with section("Training's reproducibility"):
            check_reproducibility(table, runs, plan["check_size"], plan["restart_steps"])

    table.print()
    seconds = time.perf_counter() - started
    print(f"\n{seconds:.0f} s in all")
    if args.output:
        harness.write_report({"environment": env, "quick": args.quick, "seconds": seconds, "passed": table.passed,
                              "rows": table.rows}, args.output, args.overwrite)
    return 0 if table.passed else 1


if __name__ == "__main__":
    sys.exit(main())
