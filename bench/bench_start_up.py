"""What a user waits for before the first vectors, and before and after a training run's steps.

Each measurement runs in a new process, as a user's script does, and is
repeated `--repeats` times (the range is printed):

- **inference**, for each size of `--sizes` (random weights written
  once) and each Keras backend of `--backends`: `import bilm` (with the
  backend), `bilm.load` and the first one-sentence `embed` call
  (`bench_latency.start_up`);
- **training**, on each Keras backend of `--backends`: a small run from files, `bilm.training.train_from_files`
  on a Zipfian corpus (`common.write_corpus`) with the small
  configuration cut down as in `bench_train.py`'s quick run (LSTM 64,
  projection 16, a sixteenth of the filters, batch 8 x 20, 512 negative
  samples) for `--steps` steps: `import bilm`, the set-up before the first
  step (options, data, model), the first step (tracing and compiling the
  training step), the other steps, and after them the boundary-state
  measure and the last save. What is outside the steps is the fixed cost.
"""
import os
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

import harness  # noqa: E402
from machine import machine_line  # noqa: E402

_TRAINING_RUN = """
import json, os, sys, time
start = time.perf_counter()
import bilm
import bilm.training.run.loop  # what the steps' clock patches, in the import's time
imported = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from common import PartTimer, timed_steps

directory, steps, train_file, vocab_file = sys.argv[1], int(sys.argv[2]), *sys.argv[4:6]
marks, timer = {"imported": imported - start}, PartTimer()

def time_the_boundary_state(run):
    run.measure_boundary_state = timer.wrap("boundary_state", run.measure_boundary_state)

with timed_steps(time_the_boundary_state) as timed:
    bilm.training.train_from_files(train_file, vocab_file, os.path.join(directory, "run"),
                                   os.path.join(directory, "options.json"), max_steps=steps, verbose=0)
ended = time.perf_counter()
marks.update(timer.seconds)
marks["set_up"] = timed[0]["begun"] - start - marks["imported"]
marks["first_step"] = timed[0]["ended"] - timed[0]["begun"]
marks["other_steps"] = sum(step["ended"] - step["begun"] for step in timed[1:])
marks["after_steps"] = ended - timed[-1]["ended"]
print(json.dumps(marks))
"""


def training_start_up(steps, backend="tensorflow"):
    """`{phase: seconds}` of one small training run from files in a new process on the Keras `backend` (its files
    removed after)."""
    from common import write_corpus

    from bilm.presets import training_options

    batch_size, unroll_steps, n_vocab = 8, 20, 2000
    options = training_options("small", batch_size=batch_size, unroll_steps=unroll_steps, n_tokens_vocab=n_vocab + 3,
                               n_negative_samples_batch=512, n_train_tokens=batch_size * unroll_steps * 1000)
    options["lstm"].update(dim=64, projection_dim=16)
    options["char_cnn"]["filters"] = [[w, max(1, n // 16)] for w, n in options["char_cnn"]["filters"]]
    with tempfile.TemporaryDirectory(prefix="bench_start_up_") as directory:
        corpus = write_corpus(directory, n_vocab, batch_size * unroll_steps * (steps + 4) * 4)  # train, vocabulary
        harness.write_report(options, os.path.join(directory, "options.json"), overwrite=True)
        return harness.printed_json(["-c", _TRAINING_RUN, directory, str(steps), BENCH, *corpus], "The training run",
                                    dict(os.environ, KERAS_BACKEND=backend))


def inference_start_ups(size, repeats, kernel_dtype="float32", backends=("tensorflow",)):
    """`{backend: [(import, bilm.load, first sentence) seconds] * repeats}`, each in a new process on that Keras
    backend, for one random-weight model of `size` (written once, removed after)."""
    from bench_latency import real_sentences, start_up
    from common import random_model

    sentence = real_sentences(1)[0]
    with tempfile.TemporaryDirectory(prefix=f"bench_start_up_{size}_") as directory:
        model = random_model(directory, size)
        return {backend: [start_up(model, kernel_dtype, sentence, backend) for _ in range(repeats)]
                for backend in backends}


def _range(values):
    low, high = min(values), max(values)
    return f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"


def main(argv=None):
    parser = harness.parser(__doc__, sizes=["small", "original"], backends=["tensorflow"], steps=3)
    parser.add_argument("--what", default="inference,training", help="inference, training or both")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    what = args.what.split(",")
    print(machine_line(), flush=True)
    if "inference" in what:
        for size in args.sizes:
            for backend, runs in inference_start_ups(size, args.repeats, backends=args.backends).items():
                imported, loaded, first = zip(*runs)
                print(f"inference, {size}, {backend}: import bilm and {backend} {_range(imported)} s, bilm.load "
                      f"{_range(loaded)} s, first sentence {_range(first)} s; load + first sentence "
                      f"{_range([a + b for a, b in zip(loaded, first)])} s", flush=True)
    if "training" in what:
        for backend in args.backends:
            runs = [training_start_up(args.steps, backend) for _ in range(args.repeats)]
            phases = ("imported", "set_up", "first_step", "other_steps", "after_steps")
            outside = [r["set_up"] + r["first_step"] + r["after_steps"] for r in runs]
            print(f"training, {backend}, {args.steps} steps: " + ", ".join(
                f"{phase.replace('_', ' ')} {_range([r[phase] for r in runs])} s" for phase in phases)
                + f" (of which the boundary state {_range([r['boundary_state'] for r in runs])} s); outside the steps "
                f"(set-up, first step, after): {_range(outside)} s, with the import "
                f"{_range([o + r['imported'] for o, r in zip(outside, runs)])} s", flush=True)


if __name__ == "__main__":
    main()
