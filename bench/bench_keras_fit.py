#!/usr/bin/env python
"""ELMo inside a Keras model's training, on every Keras backend: the steps of a tagger's `fit`.

The model a downstream user trains: `ELMoEmbedding` (a random-weight biLM of `--size`, written once with
`write_random_model(..., seed=0)`, `start="zeros"`, char ids in from `bilm.Batcher`) under a per-token
`Dense` tagger, compiled with Adam and Keras's default `jit_compile="auto"` (XLA on JAX; on TensorFlow,
Keras leaves a CPU-only machine uncompiled), trained by `model.fit` on `--batch_size` sentences of
`--length` made-up words (Zipfian, `common.zipf_sentences`) a step. The biLM is frozen (the default: only
the mix and the tagger train) or, with `--trainable_bilm`, fine-tuned. Each backend runs in a process of
its own, `KERAS_BACKEND` set before `import bilm`; the model is written into `--work_dir` (default: a
temporary folder, removed after the run).

For each backend: the first step's seconds (tracing, compiling), the median of `--steps` timed steps after
`--warmup` untimed ones (each step's time from `fit`'s batch callbacks), tokens/sec at that median, the
loss after the first and the last of them (Keras's running mean), and the process's peak resident memory.
Then the same model's `predict` over the same batches (median step, after one call), so that a step's cost
beside inference is seen.

    python bench/bench_keras_fit.py --size small --backends tensorflow,jax,torch
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from common import model_files, random_model, zipf_sentences  # noqa: E402
from harness import BACKEND_MODULES, parser, printed_json  # noqa: E402
from machine import machine_line, peak_rss_gib  # noqa: E402


def parse_args(argv=None):
    command = parser(__doc__, size="small", backends=list(BACKEND_MODULES), batch_size=32, steps=8, warmup=2,
                     work_dir=None)
    command.add_argument("--length", type=int, default=20, help="words a sentence (default: 20)")
    command.add_argument("--trainable_bilm", action="store_true", help="fine-tune the biLM too")
    command.add_argument("--child", choices=list(BACKEND_MODULES), help=argparse.SUPPRESS)
    args = command.parse_args(argv)
    if min(args.batch_size, args.steps, args.length) < 1 or args.warmup < 0:
        command.error("--batch_size, --steps and --length must be >= 1, --warmup >= 0")
    return args


class StepTimes:
    """A Keras callback's list of each batch's seconds in `fit` or `predict` (`seconds`, reset at each start), and
    the loss `fit` logged at each (`losses`: Keras's running mean over the epoch's batches; reset by `fit` alone)."""

    def __init__(self, keras):
        times = self

        class Callback(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                times.seconds, times.losses = [], []

            def on_predict_begin(self, logs=None):
                times.seconds = []

            def on_train_batch_begin(self, batch, logs=None):
                times.started = time.perf_counter()

            on_predict_batch_begin = on_train_batch_begin

            def on_train_batch_end(self, batch, logs=None):
                times.seconds.append(time.perf_counter() - times.started)
                if logs and "loss" in logs:
                    times.losses.append(float(logs["loss"]))

            on_predict_batch_end = on_train_batch_end

        self.callback, self.seconds, self.losses, self.started = Callback(), [], [], None


def measure(args):
    """One backend's figures (this process's `KERAS_BACKEND`), a dict."""
    import keras
    import numpy as np

    import bilm
    from bilm.options import load_options

    options_file, weight_file = model_files(os.path.join(args.work_dir, f"model-{args.size}"))
    n = args.batch_size * (1 + args.warmup + args.steps)
    sentences = zipf_sentences(n, seed=1, lengths=(args.length, args.length))
    ids = bilm.Batcher(None, load_options(options_file).token_id_width).batch_sentences(sentences)
    tags = np.random.default_rng(2).integers(0, 3, (n, args.length))
    keras.utils.set_random_seed(0)
    layer = bilm.ELMoEmbedding.from_files(options_file, weight_file, start="zeros",
                                          trainable_bilm=args.trainable_bilm)
    inputs = keras.Input(shape=(None, ids.shape[-1]), dtype="int32")
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(layer(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
    times = StepTimes(keras)
    first = args.batch_size
    start = time.perf_counter()
    model.fit(ids[:first], tags[:first], batch_size=args.batch_size, verbose=0)
    first_step = time.perf_counter() - start
    model.fit(ids[first:], tags[first:], batch_size=args.batch_size, shuffle=False, verbose=0,
              callbacks=[times.callback], steps_per_epoch=args.warmup + args.steps)
    step = statistics.median(times.seconds[args.warmup:])
    model.predict(ids[:first], batch_size=args.batch_size, verbose=0)
    model.predict(ids[first:], batch_size=args.batch_size, verbose=0, callbacks=[times.callback])
    predict_step = statistics.median(times.seconds[args.warmup:])
    tokens = args.batch_size * args.length
    return {"backend": keras.backend.backend(), "first_step_seconds": first_step, "step_seconds": step,
            "tokens_per_sec": tokens / step, "predict_tokens_per_sec": tokens / predict_step,
            "loss": [times.losses[0], times.losses[-1]],
            "peak_rss_gib": peak_rss_gib()}


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        print(json.dumps(measure(args)))
        return
    if args.work_dir is not None:
        os.makedirs(args.work_dir, exist_ok=True)
        return run(args, args.work_dir, argv)
    with tempfile.TemporaryDirectory(prefix="bench_keras_fit_") as work:
        return run(args, work, argv)


def run(args, work, argv):
    """Writes the model into `work` (once) and prints each backend's figures, measured in a process of its own."""
    random_model(work, args.size)
    print(machine_line(), flush=True)
    what = "fine-tuned biLM" if args.trainable_bilm else "frozen biLM"
    print(f"{args.size} size, {what}: batches of {args.batch_size} x {args.length} words, median of {args.steps} "
          f"steps after {args.warmup}")
    print("| backend | fit tokens/sec | step ms | first step s | predict tokens/sec | loss first, last | peak GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    flags = list(argv if argv is not None else sys.argv[1:])
    for backend in args.backends:
        result = printed_json([os.path.abspath(__file__), *flags, "--work_dir", work, "--child", backend],
                              f"{backend}: the benchmark", env={**os.environ, "KERAS_BACKEND": backend})
        print(f"| {backend} | {result['tokens_per_sec']:,.0f} | {result['step_seconds'] * 1000:.0f} | "
              f"{result['first_step_seconds']:.2f} | {result['predict_tokens_per_sec']:,.0f} | "
              f"{result['loss'][0]:.3f}, {result['loss'][1]:.3f} | {result['peak_rss_gib']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
