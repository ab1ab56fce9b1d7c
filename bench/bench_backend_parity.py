#!/usr/bin/env python
"""Learning parity of the backends (issue 47): the same training run on TensorFlow, JAX and PyTorch, on real text.

Writes GCIDE shards (Debian's dict-gcide, fetched once by bench/real_text.py)
and their vocabulary, then runs `bin/train_elmo.py` with the same options,
shards, seed and `--max_steps` once per backend (each in its own process,
`KERAS_BACKEND` set) with `--heldout_prefix`, and prints each run's held-out
perplexity (full softmax, no dropout, LSTM states carried from batch to
batch: the same measure on both), its training speed, and the relative
difference. Both draw the same dropout masks and negatives from the seed
(TensorFlow's stateless random numbers, computed on JAX by
`bilm.backend.jax.random`). From their own initial weights the two runs are two
runs of one recipe; with `--shared_start` (one random model as the start of
both) they are one run on two backends, apart only by float round-off and
what 300 steps make of it.

    python bench/bench_backend_parity.py --size small --steps 300 --output parity.json
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from machine import clocked, cpu_summary, machine_line  # noqa: E402
from real_text import write_gcide_shards  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERPLEXITY = re.compile(r"held-out perplexity ([0-9.]+)")
SPEED = re.compile(r"([0-9,]+) tokens/sec")


def _run(command, backend, log_path):
    """Runs `command` with `backend`, its output into `log_path`; returns the output. Ctrl-C or SIGTERM ask the
    run to save and stop (its own SIGINT), then end this script."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"})
        try:
            status = process.wait()
        except BaseException:
            process.send_signal(signal.SIGINT)
            process.wait()
            raise
    output = open(log_path).read()
    if status != 0:
        raise SystemExit(f"{' '.join(map(str, command))} on {backend} failed ({status}):\n{output[-3000:]}")
    return output


def _shared_start(work_dir, size, seed, backend):
    """`(model directory, options file)`: one random model of `size` drawn with `seed`, and an options file
    of the size's training keys (its architecture too, which `--init_from` checks); written once, by
    `backend`."""
    directory = os.path.join(work_dir, f"start-{size}-{seed}-{backend}")
    options_file = os.path.join(directory, "training_options.json")
    if not os.path.exists(options_file):
        temporary = directory + ".partial"
        code = ("import json, os, sys; from bilm.models.random_weights import write_random_model; "
                "from bilm.presets import training_options; "
                "directory, size, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]); "
                "write_random_model(directory, training_options(size), seed=seed); "
                "json.dump(training_options(size), open(os.path.join(directory, 'training_options.json'), 'w'))")
        _run([sys.executable, "-c", code, temporary, size, str(seed)], backend, directory + ".log")
        os.replace(temporary, directory)
    return directory, options_file


def main():
    parser = harness.parser(__doc__, size="small", steps=300, batch_size=None, backends=["tensorflow", "jax"], seed=0,
                            work_dir=os.path.join(tempfile.gettempdir(), "bilm_backend_parity"), output=None,
                            overwrite=True)
    parser.add_argument("--train_tokens", type=int, default=2_000_000)
    parser.add_argument("--heldout_tokens", type=int, default=50_000)
    parser.add_argument("--max_vocab", type=int, default=50_000, help="most lines of the vocabulary")
    parser.add_argument("--shared_start", action="store_true",
                        help="start both runs from one random model of the size (drawn with --seed) instead of "
                             "each backend's own initial weights")
    parser.add_argument("--start_backend",
                        help="the backend that draws the shared start (default: the first of --backends); since "
                             "2026-12-01 a seed draws the same start on every backend (bilm.layers.initializers), "
                             "before that Keras's initialisers drew other numbers on each")
    args = parser.parse_args()
    harness.interrupt_on_signals()  # the running child is then asked to save and stop (`_run`)
    harness.check_output(args.output, args.overwrite)
    print(machine_line(), flush=True)  # the runs' seconds are this machine's
    backends = args.backends
    text = write_gcide_shards(os.path.join(args.work_dir, "gcide"), args.train_tokens, args.heldout_tokens)
    vocab = os.path.join(args.work_dir, f"vocab_{args.max_vocab}.txt")
    if not os.path.exists(vocab):
        _run([sys.executable, "bin/build_vocab.py", "--train_prefix", text["train"], "--vocab_file", vocab,
              "--max_size", str(args.max_vocab)], backends[0], vocab + ".log")
    if args.shared_start:
        start_dir, options_file = _shared_start(args.work_dir, args.size, args.seed,
                                                args.start_backend or backends[0])
        model = ["--init_from", start_dir, "--options_file", options_file, "--softmax_init", "encoding"]
    else:
        model = ["--size", args.size]
    start = "shared" if args.shared_start else "own"
    runs = {}
    for backend in backends:
        save_dir = os.path.join(args.work_dir,
                                f"{args.size}-{args.steps}-{args.seed}-{start}-{backend}-{time.time():.0f}")
        command = [sys.executable, "bin/train_elmo.py", *model, "--train_prefix", text["train"],
                   "--vocab_file", vocab, "--save_dir", save_dir, "--heldout_prefix", text["heldout"],
                   "--max_steps", str(args.steps), "--n_train_tokens", str(text["n_train_tokens"]),
                   "--seed", str(args.seed), "--checkpoint_every", str(args.steps), "--heldout_every", str(args.steps)]
        if args.batch_size:
            command += ["--batch_size", str(args.batch_size)]
        output, seconds = clocked(lambda: _run(command, backend, save_dir + ".log"))
        perplexities = PERPLEXITY.findall(output)
        speeds = SPEED.findall(output)
        runs[backend] = {"heldout_perplexity": float(perplexities[-1]) if perplexities else None,
                         "tokens_per_second": float(speeds[-1].replace(",", "")) if speeds else None,
                         "seconds": round(seconds, 1), "log": save_dir + ".log"}
        print(f"{backend}: held-out perplexity {runs[backend]['heldout_perplexity']}, "
              f"{runs[backend]['seconds']} s", flush=True)
    report = {"machine": cpu_summary(), "size": args.size, "steps": args.steps, "seed": args.seed,
              "train_tokens": text["n_train_tokens"],
              "start": start, "start_backend": (args.start_backend or backends[0]) if args.shared_start else None,
              "runs": runs}
    if len(backends) == 2 and all(runs[b]["heldout_perplexity"] for b in backends):
        a, b = (runs[name]["heldout_perplexity"] for name in backends)
        report["relative_difference"] = abs(a - b) / a
        print(f"relative difference {report['relative_difference']:.2%} ({backends[1]} vs {backends[0]})")
    print(json.dumps(report, indent=1))
    if args.output:
        harness.write_report(report, args.output, args.overwrite)


if __name__ == "__main__":
    main()
