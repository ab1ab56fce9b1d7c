#!/usr/bin/env python
"""The same biLM, sentences and batch sizes on every Keras backend: TensorFlow, JAX and PyTorch.

A random-weight model of `--size` (`write_random_model(..., seed=0)`;
`tiny` is a toy size for tests) is written once (under the first of the
backends that imports), and every backend loads
the same files as `BidirectionalLanguageModel(..., stateful=False,
start="zeros")`. Each backend runs each batch size in a process of its own
(the Keras backend is fixed per process, and the peak memory is then that
batch size's), with `KERAS_BACKEND` set before `import bilm`; this process
imports neither Keras nor TensorFlow, so the bench runs where only JAX (or
only PyTorch) is installed. A backend that is not installed is reported as
skipped, with the reason.

The sentences are synthetic: `--length` made-up words each (Zipfian
frequencies, as `common.zipf_sentences`), all of one length, so that every
call of a batch size has one shape: JAX compiles once per input shape, and
a steady state is then steady. With `--max_length`, each sentence's length
is drawn from `--length` to `--max_length` instead, as in real text: the
calls have many shapes, and what JAX's compilations cost is in the figures. For each backend and batch size B:
- first call: seconds of the first call at B in a new process, after the
  model is loaded (`load_seconds` in the JSON): tracing and compiling
  included (TensorFlow traces its `tf.function`s, JAX compiles with XLA,
  PyTorch runs eagerly; each encodes the call's words into its token
  cache), on B sentences of their own;
- tokens/sec: the steady state after that call, over ceil(sentences / B)
  full batches (at least one), ids made beforehand (the `Batcher`'s work is
  the same on every backend), each call's `lm_embeddings` brought to NumPy;
  beside it, the fraction of its device's float32 matmul rate that it
  reaches (on a CPU NumPy's BLAS, measured before the children run; on a
  GPU the backend's own 8192 x 8192 products there, with the bench's TF32
  setting), counting the products that ran (`common.embedding_flops`: the
  LSTMs on every row, the encoder's highway and projection on the tokens
  new to the token cache, the char convolutions not at all), as
  `bench_embed.py` counts them;
- peak memory: the process's peak resident memory (`getrusage`; the
  backend's import included) and, on a GPU, the backend's own peak
  (`torch.cuda.max_memory_allocated`, JAX's `memory_stats()
  ["peak_bytes_in_use"]`, TensorFlow's `get_memory_info(...)["peak"]`);
- the device each backend ran on (on a machine with a GPU, each uses it
  when its build can); float32 matmuls without TF32 there unless `--tf32`
  (as `bin/elmo.py`);
- max |deviation| of `lm_embeddings` on the first min(sentences, 32) timed
  sentences from the reference: TensorFlow float32 at the first batch size
  it ran when TensorFlow is installed, else a float64 NumPy forward pass
  (tests/numpy_reference.py, the tests' reference), else the first backend that
  ran; and, for every row, from the float64 NumPy pass.

Every backend runs with its token cache (each distinct word encoded once
and kept, as every user's model does): `--no_token_cache` turns it off. The report (a table, then JSON) names the
machine, the backends' versions and the reference; `--output` also writes
the JSON (atomically; an existing file only with `--overwrite`). Exit
status 0 when every backend ran or was skipped, 1 when a run failed
(reported with its error), 130 / 143 on Ctrl-C / SIGTERM.
"""
import argparse
import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

CHECK_SENTENCES = 32
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from common import batch_rows, embedding_flops, model_files, random_model, zipf_sentences  # noqa: E402
from harness import BACKEND_MODULES, check_output, interrupt_on_signals, parser, read_json, write_report  # noqa: E402
from machine import clocked, cpu_summary, device_peak_gib, matmul_rate, peak_rss_gib  # noqa: E402

# === Arguments ===

def parse_args(argv=None):
    command = parser(__doc__, size="small", backends=list(BACKEND_MODULES), batch_sizes=[1, 32, 512], sentences=256,
                     output=None, overwrite=True, tf32=True)
    command.add_argument("--length", type=int, default=20, help="tokens a sentence")
    command.add_argument("--max_length", type=int,
                         help="draw each sentence's length from --length to this (default: all of --length)")
    command.add_argument("--no_token_cache", action="store_true", help="every backend without its token cache")
    command.add_argument("--child", choices=list(BACKEND_MODULES), help=argparse.SUPPRESS)
    command.add_argument("--write_model", action="store_true", help=argparse.SUPPRESS)
    command.add_argument("--child_batch_size", dest="batch_size", type=int, help=argparse.SUPPRESS)
    command.add_argument("--work", help=argparse.SUPPRESS)
    args = command.parse_args(argv)
    if args.sentences < 1 or args.length < 1:
        command.error("--sentences and --length must be >= 1")
    if args.max_length is not None and args.max_length < args.length:
        command.error(f"--max_length must be >= --length ({args.length}); received {args.max_length}")
    return args


# === Sentences ===

def timed_batches(n_sentences, batch_size):
    """Full batches timed at `batch_size`: enough for `n_sentences`, at least one."""
    return max(1, math.ceil(n_sentences / batch_size))


# === The float64 NumPy reference ===

def numpy_reference(work, size, chunk=8):
    """The float64 NumPy pass over the check sentences' ids, a chunk of sentences at a time: the tests'
    reference (tests/numpy_reference.py, which imports neither bilm nor a backend), `lm_embeddings` of a
    stateless biLM started from zeros."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        import numpy_reference as reference
    finally:
        sys.path.remove(os.path.join(ROOT, "tests"))
    options = read_json(os.path.join(work, f"model-{size}", "options.json"))
    weights = reference.read_weights(os.path.join(work, f"model-{size}", "weights.hdf5"))
    ids = np.load(os.path.join(work, "check_ids.npy"))
    return np.concatenate([reference.bilm_forward(weights, options, ids[i:i + chunk])["lm_embeddings"]
                           for i in range(0, len(ids), chunk)])


def max_abs_deviation(got, want):
    if got.shape != want.shape:
        raise ValueError(f"shapes differ: {got.shape} against {want.shape}")
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))


# === A child process: one backend, one batch size ===

def child(args):
    """Writes the model (`--write_model`) or measures `args.child` at `args.batch_size`; the result goes to
    `<work>/<name>.json`."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    name = "model" if args.write_model else f"{args.child}_{args.batch_size}"
    try:
        try:
            library = __import__(BACKEND_MODULES[args.child])
        except ImportError as error:
            library, result = None, {"skipped": f"{BACKEND_MODULES[args.child]} does not import: {error}"}
        if library is not None:
            result = write_model(args) if args.write_model else measure(args, library)
    except KeyboardInterrupt:
        sys.exit(130)
    write_report(result, os.path.join(args.work, name + ".json"), overwrite=True)


def write_model(args):
    import bilm

    options = read_json(model_files(random_model(args.work, args.size))[0])
    check = read_json(os.path.join(args.work, "sentences.json"))["timed"][:min(args.sentences, CHECK_SENTENCES)]
    ids = bilm.Batcher(None, options["char_cnn"]["max_characters_per_token"]).batch_sentences(check)
    np.save(os.path.join(args.work, "check_ids.npy"), ids)
    return {"written": True}


def measure(args, library):
    import bilm

    backend, batch_size = args.child, args.batch_size
    import keras

    if keras.backend.backend() != backend:
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not {backend} (KERAS_BACKEND={backend})")
    from bilm.commands import set_numerics

    set_numerics(tf32=args.tf32)  # float32 matmuls on a GPU unless --tf32, as bin/elmo.py runs them
    model_dir = os.path.join(args.work, f"model-{args.size}")
    max_characters = read_json(model_files(model_dir)[0])["char_cnn"]["max_characters_per_token"]
    sentences = read_json(os.path.join(args.work, "sentences.json"))
    model, load_seconds = clocked(lambda: bilm.BidirectionalLanguageModel(
        *model_files(model_dir), stateful=False, start="zeros", token_cache_size=0 if args.no_token_cache else 50_000))
    rss_after_load = peak_rss_gib()
    batcher = bilm.Batcher(None, max_characters)

    warm_up = batcher.batch_sentences(sentences["warm_up"][:batch_size])
    start = time.perf_counter()
    first = model(warm_up)["lm_embeddings"]
    keras.ops.convert_to_numpy(first)
    first_call_seconds = time.perf_counter() - start

    n_batches = timed_batches(args.sentences, batch_size)
    timed = sentences["timed"][:n_batches * batch_size]
    batches = [batcher.batch_sentences(timed[i:i + batch_size]) for i in range(0, len(timed), batch_size)]
    n_check = min(args.sentences, CHECK_SENTENCES)
    kept = []
    cache = model.token_cache
    misses = None if cache is None else cache.misses
    start = time.perf_counter()
    for ids in batches:
        layers = keras.ops.convert_to_numpy(model(ids)["lm_embeddings"])
        if sum(len(array) for array in kept) < n_check:
            kept.append(layers[:n_check].copy())
    seconds = time.perf_counter() - start
    # The products that ran (`common.embedding_flops`): the encoder on the tokens new to the cache (without it,
    # each batch's distinct tokens), the LSTMs on every row.
    groups = [timed[i:i + batch_size] for i in range(0, len(timed), batch_size)]
    encoded = sum(batch_rows(model.options, group)[1] for group in groups) if cache is None else cache.misses - misses
    # The checked sentences' vectors on the time axis of the reference's one batch of them (its longest
    # sentence): a batch's own is its longest sentence's, and every vector past a sentence's end is zero.
    steps = max(len(sentence) for sentence in timed[:n_check])
    kept = [np.pad(array, [(0, 0), (0, 0), (0, max(steps - array.shape[2], 0)), (0, 0)])[:, :, :steps]
            for array in kept]
    np.save(os.path.join(args.work, f"{backend}_{batch_size}.npy"), np.concatenate(kept)[:n_check])

    device, device_peak = describe_device(backend, library, first), device_peak_gib()
    device_rate = None if device.startswith("cpu") else device_matmul_rate()
    tokens = sum(len(sentence) for sentence in timed)
    return {
        "backend": backend,
        "batch_size": batch_size,
        "versions": {"keras": keras.__version__, backend: library.__version__},
        "device": device,
        "load_seconds": load_seconds,
        "first_call_seconds": first_call_seconds,
        "timed_batches": len(batches),
        "timed_sentences": len(timed),
        "timed_tokens": tokens,
        "seconds": seconds,
        "tokens_per_sec": tokens / seconds,
        "encoded_tokens": int(encoded),
        "gflops": embedding_flops(model.options, groups, encoded) / 1e9,
        "rss_after_load_gib": rss_after_load,
        "peak_rss_gib": peak_rss_gib(),
        "peak_device_memory_gib": device_peak,
        "device_float32_matmul_gflops": None if device_rate is None else device_rate / 1e9,
    }


def device_matmul_rate(n=8192, repeats=10):
    """The float32 matmul rate in FLOP/s of the device Keras's backend computes on (a GPU: the bound of its
    embedding, which the host's NumPy rate is not), timed with `keras.ops.matmul` after one untimed product;
    the products queue in order, so reading one element of the last waits for them all."""
    import keras

    a = keras.random.normal((n, n), seed=0, dtype="float32")
    float(keras.ops.convert_to_numpy(keras.ops.matmul(a, a)[0, 0]))
    start = time.perf_counter()
    for _ in range(repeats):
        product = keras.ops.matmul(a, a)
    float(keras.ops.convert_to_numpy(product[0, 0]))
    return 2 * n ** 3 * repeats / (time.perf_counter() - start)


def describe_device(backend, library, tensor):
    """The device `tensor` lives on, in words: `"cpu (...)"` or the GPU with its name."""
    if backend == "tensorflow":
        device = tensor.device.split("device:")[-1]  # "CPU:0", "GPU:0"
        if not device.startswith("GPU"):
            return f"cpu ({device})"
        details = library.config.experimental.get_device_details(library.config.list_physical_devices("GPU")[0])
        return f"gpu ({device}, {details.get('device_name', '?')})"
    if backend == "jax":
        device = next(iter(tensor.devices()))
        return f"cpu ({device})" if device.platform == "cpu" else f"{device.platform} ({device}, {device.device_kind})"
    device = tensor.device
    return f"gpu ({device}, {library.cuda.get_device_name(device)})" if device.type == "cuda" else f"cpu ({device})"


# === The parent ===

class Children:
    """The child processes, one at a time; `stop` ends the running one (SIGTERM, then SIGKILL)."""

    def __init__(self, work, args):
        self.work, self.args, self.running = work, args, None

    def run(self, name, backend, *flags):
        env = dict(os.environ, KERAS_BACKEND=backend)  # TF_CPP_MIN_LOG_LEVEL as the harness set it
        command = [sys.executable, os.path.abspath(__file__), "--work", self.work, "--size", self.args.size,
                   "--sentences", str(self.args.sentences), *flags]
        if self.args.no_token_cache:
            command.append("--no_token_cache")
        if self.args.tf32:
            command.append("--tf32")
        with open(os.path.join(self.work, name + ".err"), "w") as stderr:
            self.running = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=stderr,
                                            stderr=stderr)
            code = self.running.wait()
            self.running = None
        result_file = os.path.join(self.work, name + ".json")
        if code == 0 and os.path.exists(result_file):
            return read_json(result_file)
        with open(os.path.join(self.work, name + ".err"), errors="replace") as f:
            tail = f.read()[-3000:]
        lines = [line for line in tail.splitlines() if line.strip()]
        why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return {"failed": f"{why}: {lines[-1] if lines else 'no output'}", "stderr_tail": tail}

    def stop(self):
        process = self.running
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def installed(backend):
    """None when `backend`'s module can be imported (as far as finding it tells), else why not."""
    module = BACKEND_MODULES[backend]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError) as error:
        return f"not installed: {error}"
    return None if found else f"not installed: no module named {module!r}"


def run(args):
    check_output(args.output, args.overwrite)
    work = tempfile.mkdtemp(prefix="bench_backends_")
    children = Children(work, args)
    try:
        return measure_all(args, work, children)
    finally:
        previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            children.stop()
            shutil.rmtree(work, ignore_errors=True)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def measure_all(args, work, children):
    batch_sizes = args.batch_sizes
    warm_up_count = max(batch_sizes)
    timed_count = max(timed_batches(args.sentences, b) * b for b in batch_sizes)
    pool = zipf_sentences(warm_up_count + timed_count, lengths=(args.length, args.max_length or args.length))
    write_report({"warm_up": pool[:warm_up_count], "timed": pool[warm_up_count:]}, os.path.join(work, "sentences.json"),
                 overwrite=True)

    report = {
        "bench": "bench_backends",
        "command": " ".join([os.path.relpath(os.path.abspath(__file__), ROOT)] + sys.argv[1:]),
        "size": args.size, "length": args.length, "max_length": args.max_length, "sentences": args.sentences,
        "batch_sizes": batch_sizes,
        "check_sentences": min(args.sentences, CHECK_SENTENCES), "token_cache": not args.no_token_cache,
        "tf32": args.tf32, "machine": {"cpu": cpu_summary(), "cores": os.cpu_count(), "platform": platform.platform(),
                                       "python": platform.python_version(), "numpy": np.__version__},
        "backends": {}, "reference": None,
    }
    rate = matmul_rate()  # before any child runs: nothing else of the bench's on the cores
    report["machine"]["float32_matmul_gflops"] = rate / 1e9
    reasons = {backend: installed(backend) for backend in args.backends}
    available = [backend for backend in args.backends if reasons[backend] is None]
    lengths = args.length if args.max_length is None else f"{args.length}-{args.max_length}"
    print(f"bench_backends: {args.size} model, {lengths}-token sentences, batch sizes "
          f"{', '.join(map(str, batch_sizes))}, backends {', '.join(args.backends)}", flush=True)
    model_written = False
    report["model_failures"] = {}
    for backend in available:  # the model, written once under the first backend that can
        result = children.run("model", backend, "--child", backend, "--write_model")
        if "written" in result:
            model_written = True
            break
        if "skipped" in result:
            reasons[backend] = result["skipped"]
        else:
            report["model_failures"][backend] = result["failed"]
            print(f"{backend:>10}: writing the model FAILED ({result['failed']}):\n{result['stderr_tail']}",
                  file=sys.stderr, flush=True)
    for backend in args.backends:
        entry = report["backends"][backend] = {"status": "skipped", "reason": reasons[backend], "results": []}
        if reasons[backend] is not None or not model_written:
            entry["reason"] = entry["reason"] or "no model: no backend wrote it"
            print(f"{backend:>10}: skipped ({entry['reason']})", flush=True)
            continue
        entry.update(status="ran", reason=None)
        for batch_size in batch_sizes:
            result = children.run(f"{backend}_{batch_size}", backend, "--child", backend,
                                  "--child_batch_size", str(batch_size))
            if "skipped" in result:
                entry.update(status="skipped", reason=result["skipped"], results=[])
                print(f"{backend:>10}: skipped ({result['skipped']})", flush=True)
                break
            if "failed" in result:
                entry["status"] = "failed"
                entry["results"].append({"batch_size": batch_size, **result})
                print(f"{backend:>10} batch {batch_size:>4}: FAILED ({result['failed']})", flush=True)
                continue
            entry.setdefault("versions", result["versions"])
            entry.setdefault("device", result["device"])
            entry["results"].append(result)
            print(f"{backend:>10} batch {batch_size:>4}: {result['tokens_per_sec']:9,.0f} tokens/sec, first call "
                  f"{result['first_call_seconds']:.2f} s, peak RSS {result['peak_rss_gib']:.2f} GiB "
                  f"on {result['device']}", flush=True)
    if model_written:
        add_deviations(report, work)
        for entry in report["backends"].values():
            for result in entry["results"]:
                if "tokens_per_sec" in result:
                    bound = rate if result.get("device_float32_matmul_gflops") is None else (
                        result["device_float32_matmul_gflops"] * 1e9)
                    result["fraction_of_matmul_rate"] = result["gflops"] * 1e9 / result["seconds"] / bound
    print_table(report)
    print(json.dumps(report, indent=2))
    if args.output:
        write_report(report, args.output, args.overwrite)
        print(f"wrote {args.output}", flush=True)
    if not model_written:
        return 1
    return int(any(entry["status"] == "failed" for entry in report["backends"].values()))


def add_deviations(report, work):
    """Each run's max |deviation| from the reference (`max_abs_deviation`) and from float64 NumPy."""
    runs = [(backend, result) for backend, entry in report["backends"].items() for result in entry["results"]
            if "tokens_per_sec" in result]
    if not runs:
        return
    outputs = {(backend, result["batch_size"]): np.load(os.path.join(work, f"{backend}_{result['batch_size']}.npy"))
               for backend, result in runs}
    try:
        float64, float64_error = numpy_reference(work, report["size"]), None
    except Exception as error:  # the table still has the other figures
        float64, float64_error = None, f"{type(error).__name__}: {error}"
    tensorflow = [key for key in outputs if key[0] == "tensorflow"]
    if tensorflow:
        key = tensorflow[0]
        reference, description = outputs[key], f"tensorflow float32 at batch size {key[1]}"
    elif float64 is not None:
        key, reference, description = None, float64, "float64 NumPy forward pass (bench_backends.py)"
    else:
        key = next(iter(outputs))
        reference, description = outputs[key], f"{key[0]} at batch size {key[1]} (the first backend that ran)"
    report["reference"] = {"description": description, "sentences": len(reference),
                           "max_abs_value": float(np.max(np.abs(reference), initial=0.0)),
                           "float64_error": float64_error}
    for backend, result in runs:
        got = outputs[(backend, result["batch_size"])]
        result["is_reference"] = key == (backend, result["batch_size"])
        result["max_abs_deviation"] = max_abs_deviation(got, reference)
        result["max_abs_deviation_float64"] = None if float64 is None else max_abs_deviation(got, float64)


def gpu_rates(report):
    """', GPU float32 matmul N GFLOP/s (backend)' for each backend that ran on a GPU; '' where none did."""
    rates = [f", {entry['device']} float32 matmul {result['device_float32_matmul_gflops']:.0f} GFLOP/s ({backend})"
             for backend, entry in report["backends"].items() for result in entry["results"][:1]
             if result.get("device_float32_matmul_gflops") is not None]
    return "".join(rates)


def print_table(report):
    reference = report["reference"] or {}
    print(f"\nmachine: {report['machine']['cpu']}; "
          f"float32 matmul {report['machine']['float32_matmul_gflops']:.0f} GFLOP/s (NumPy){gpu_rates(report)}; "
          f"model {report['size']}, "
          f"{report['length']}{'' if report.get('max_length') is None else '-' + str(report['max_length'])}"
          f"-token sentences; the token cache {'on' if report['token_cache'] else 'off'}")
    print(f"max |deviation| of lm_embeddings on {reference.get('sentences', 0)} sentences, from the reference: "
          f"{reference.get('description', 'none')} (its largest |value| {reference.get('max_abs_value', 0):.3g}); "
          "and from float64 NumPy")
    header = ("backend", "version", "device", "batch", "tokens/sec", "% its matmul", "first call s", "peak RSS GiB",
              "peak dev GiB", "max|dev| ref", "max|dev| f64")
    rows = []
    for backend, entry in report["backends"].items():
        version = entry.get("versions", {}).get(backend, "")
        if entry["status"] == "skipped":
            rows.append((backend, "", "skipped: " + (entry["reason"] or "")) + ("",) * 8)
        for r in entry["results"]:
            if "failed" in r:
                rows.append((backend, version, "FAILED: " + r["failed"][:80], str(r["batch_size"])) + ("",) * 7)
                continue
            device_peak = r["peak_device_memory_gib"]
            deviation = r.get("max_abs_deviation")
            float64 = r.get("max_abs_deviation_float64")
            rows.append((backend, version, r["device"], str(r["batch_size"]), f"{r['tokens_per_sec']:,.0f}",
                         f"{100 * r['fraction_of_matmul_rate']:.1f}", f"{r['first_call_seconds']:.2f}",
                         f"{r['peak_rss_gib']:.2f}",
                         "-" if device_peak is None else f"{device_peak:.2f}",
                         "reference" if r.get("is_reference") else ("-" if deviation is None else f"{deviation:.1e}"),
                         "-" if float64 is None else f"{float64:.1e}"))
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(cell.rjust(width) if 3 <= i else cell.ljust(width)
                        for i, (cell, width) in enumerate(zip(row, widths))).rstrip())
    print(flush=True)


def main():
    args = parse_args()
    if args.child or args.write_model:
        return child(args)
    interrupt_on_signals()  # SIGTERM as Ctrl-C: exit status 143 and 130
    try:
        status = run(args)
    except KeyboardInterrupt as stopped:
        signum = signal.Signals[stopped.args[0]] if stopped.args else signal.SIGINT
        print(f"\nStopped by {signum.name}.", file=sys.stderr)
        sys.exit(128 + signum)
    sys.exit(status)


if __name__ == "__main__":
    main()
