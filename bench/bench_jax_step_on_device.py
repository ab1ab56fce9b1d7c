#!/usr/bin/env python
"""The JAX training step on JAX's first device (a GPU where there is one) checked against the same step on
the CPU, and against itself, without TensorFlow: what `bin/train_elmo.py` promises on a GPU (float32 stays
float32, `--seed` repeats a run), where no test can run.

    python bench/bench_jax_step_on_device.py                  # small size, 3 steps, 50,003 ids
    python bench/bench_jax_step_on_device.py --quick          # the tiny size: seconds, on a CPU too

From one start (the network's initial weights for the seed, JAX's) and the same random batches (char ids,
next-token ids), with the size's recipe (dropout, sampled softmax, Adagrad):

1. The device's steps against the CPU's (`jax.devices("cpu")`): each step's loss and gradient norm, and every
   array of the state after the last step (weights, softmax, optimizer, LSTM states), as the largest deviation
   relative to the array's largest magnitude. Float32 at JAX's "highest" precision (TF32 off, as the training
   scripts keep it) must agree to `--tolerance` (default 1e-4: round-off of other summation orders, carried
   through a few steps); with `--tf32` or `--matmul_dtype bfloat16` the figures are reported against 3e-2.
   Some arrays amplify round-off more than that: a bias that starts at zero and sits behind a ReLU moves by
   a few updates, each a sum in which a unit's sign can flip. So the CPU runs the steps once more from the
   start nudged by 1e-7 of each weight (float32's round-off), and an array's state may deviate by up to
   `SPREAD_FACTOR` times that CPU run's own deviation where this is larger than the tolerance (the small
   size's second highway bias moves 1.1e-3 of its largest value this way after 3 steps on a CPU).
2. The device twice from the same start: bit for bit, with the deterministic GPU programs the training
   scripts ask for (`set_numerics(deterministic=True)`; `--no_deterministic` leaves them off, to see whether
   the device repeats itself without them).

It prints one line a check and the seconds of each phase; exit status 0 when every check passes. On a
machine without a GPU the device is the CPU, and both checks hold trivially (the mechanics are what runs).
"""
import os
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported; TensorFlow is never imported
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from machine import clocked, machine_line  # noqa: E402

from bilm.backend.jax.training_ops import Placement  # noqa: E402
from bilm.commands import set_numerics  # noqa: E402
from bilm.presets import training_options  # noqa: E402
from bilm.training.arrays.train_step import ArrayTrainStep  # noqa: E402
from bilm.training.config.settings import training_settings  # noqa: E402

MAX_CHARACTERS = 50
SPREAD_FACTOR = 10  # the device's deviation allowed per array, in units of the CPU's own spread under round-off
NUDGE = 1e-7  # the relative nudge of the start that measures that spread: about float32's round-off


def random_batches(n, rows, steps, n_vocab, seed=0):
    """`n` batches of random char ids and next-token ids, both directions."""
    rng = np.random.default_rng(seed)
    return [{"token_characters": rng.integers(0, 261, (rows, steps, MAX_CHARACTERS), dtype=np.int32),
             "token_characters_reverse": rng.integers(0, 261, (rows, steps, MAX_CHARACTERS), dtype=np.int32),
             "next_token_id": rng.integers(0, n_vocab, (rows, steps), dtype=np.int32),
             "next_token_id_reverse": rng.integers(0, n_vocab, (rows, steps), dtype=np.int32)}
            for _ in range(n)]


def run_steps(step, start, batches):
    """`(each step's {"loss", "norm"}, the state after the last step as NumPy arrays)` from `start` (NumPy)."""
    state = step.place(jax.tree_util.tree_map(np.array, start))
    figures = []
    for i, batch in enumerate(batches):
        state, metrics = step(state, batch, i)
        figures.append({key: float(metrics[key]) for key in ("loss", "norm")})
    return figures, jax.tree_util.tree_map(np.asarray, jax.device_get(state))


def nudged(state, seed=1):
    """`state` with each float32 array multiplied by `1 + NUDGE * noise` (standard normal noise)."""
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda a: (a * (1 + NUDGE * rng.standard_normal(a.shape))).astype(a.dtype) if a.dtype == np.float32 else a,
        state)


def relative_deviation(got, want):
    """The largest |got - want| over the largest |want| (0 where both are all zeros)."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    difference = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    return difference / scale if scale else difference


def state_deviations(got, want):
    """`{path: relative_deviation}` for every array of two states."""
    flat_got, _ = jax.tree_util.tree_flatten_with_path(got)
    flat_want, _ = jax.tree_util.tree_flatten_with_path(want)
    return {jax.tree_util.keystr(path): relative_deviation(a, b)
            for (path, a), (_, b) in zip(flat_got, flat_want, strict=True)}


def main(argv=None):
    parser = harness.parser(__doc__, size="small", n_tokens_vocab=50_003, batch_size=32, unroll_steps=20,
                            n_negative=8192, steps=3, matmul_dtype="float32", tf32=True, quick=True)
    parser.add_argument("--no_deterministic", action="store_true",
                        help="leave XLA's deterministic GPU programs off (the training scripts turn them on)")
    parser.add_argument("--tolerance", type=float,
                        help="device against CPU, relative (default 1e-4 in float32, 3e-2 with --tf32 or bfloat16)")
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)
    if args.quick:
        args.size, args.n_tokens_vocab, args.batch_size, args.unroll_steps, args.n_negative = "tiny", 203, 4, 5, 64
    exact = args.matmul_dtype == "float32" and not args.tf32
    tolerance = args.tolerance or (1e-4 if exact else 3e-2)

    deterministic = set_numerics(tf32=args.tf32, deterministic=not args.no_deterministic)
    device, cpu = jax.devices()[0], jax.devices("cpu")[0]
    # The size's training recipe with the flags' vocabulary, batch and matmul operands.
    parsed, settings = training_settings(training_options(
        args.size, batch_size=args.batch_size, unroll_steps=args.unroll_steps, n_tokens_vocab=args.n_tokens_vocab,
        n_train_tokens=10 ** 9, matmul_dtype=args.matmul_dtype,
        n_negative_samples_batch=min(args.n_negative, args.n_tokens_vocab - 1)))
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}) against {cpu.platform}: size "
          f"{args.size}, batch {args.batch_size} x {args.unroll_steps}, {args.n_tokens_vocab:,} ids, "
          f"{settings.n_negative_samples_batch} negatives, dropout {settings.dropout}, {settings.optimizer}, "
          f"{args.matmul_dtype} matmuls, TF32 {'on' if args.tf32 else 'off'}, deterministic GPU programs "
          f"{'on' if deterministic else 'off'}; {args.steps} steps", flush=True)

    started = time.perf_counter()
    on_device = ArrayTrainStep(parsed, settings, seed=0, placement=Placement([device]))
    on_cpu = ArrayTrainStep(parsed, settings, seed=0, placement=Placement([cpu]))
    start = jax.tree_util.tree_map(np.asarray, jax.device_get(on_device.initial_state()))
    batches = random_batches(args.steps, args.batch_size, args.unroll_steps, args.n_tokens_vocab)
    print(f"built in {time.perf_counter() - started:.1f} s", flush=True)
    results = {}
    runs = (("device", on_device, start), ("device again", on_device, start), ("cpu", on_cpu, start),
            ("cpu, start nudged", on_cpu, nudged(start)))
    for name, step, first in runs:
        results[name], seconds = clocked(lambda: run_steps(step, first, batches))
        losses = ", ".join(f"{figures['loss']:.6f}" for figures in results[name][0])
        compiles = "the first step compiles" if name in ("device", "cpu") else "compiled before"
        print(f"{name}: {args.steps} steps in {seconds:.1f} s ({compiles}); losses {losses}", flush=True)

    checks = []
    (device_figures, device_state), (cpu_figures, cpu_state) = results["device"], results["cpu"]
    figure_deviation = max(abs(d[key] - c[key]) / abs(c[key]) for d, c in zip(device_figures, cpu_figures)
                           for key in ("loss", "norm"))
    deviations = state_deviations(device_state, cpu_state)
    spread = state_deviations(results["cpu, start nudged"][1], cpu_state)
    allowed = {path: max(tolerance, SPREAD_FACTOR * spread[path]) for path in deviations}
    worst = max(deviations, key=lambda path: deviations[path] / allowed[path])
    checks.append(("device against the CPU: losses and gradient norms", figure_deviation <= tolerance,
                   f"{figure_deviation:.2e} (tolerance {tolerance:g})"))
    checks.append(("device against the CPU: the state after the last step", deviations[worst] <= allowed[worst],
                   f"{deviations[worst]:.2e} at {worst} (allowed {allowed[worst]:.2e}: the tolerance {tolerance:g} "
                   f"or {SPREAD_FACTOR} x the CPU's own spread {spread[worst]:.2e}; {len(deviations)} arrays)"))
    again_figures, again_state = results["device again"]
    differing = [path for path, value in state_deviations(again_state, device_state).items() if value != 0.0]
    repeated = again_figures == device_figures and not differing
    checks.append(("device twice from one start: bit for bit", repeated,
                   "identical" if repeated else f"{len(differing)} array(s) differ, e.g. {differing[:3]}"))
    for name, passed, figure in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {figure}")
    failed = sum(not passed for _, passed, _ in checks)
    print("all checks passed" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
