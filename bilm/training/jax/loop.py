"""Training a biLM on JAX: the steps of `JaxTrainStep` over a data stream, checkpoints that restart exactly,
SIGINT and SIGTERM saving the step reached, the boundary state measured at the end, and the held-out
perplexity.

Needs Keras on JAX (`KERAS_BACKEND=jax`).
"""
import os
import time

import jax

from bilm.errors import UserError
from bilm.io.formats.output_files import check_output_directory, check_output_file, writer_lock
from bilm.options import holds_options, load_options, save_options
from bilm.training.config.settings import training_settings
from bilm.training.jax import checkpoints
from bilm.training.jax.boundary_state_measure import measure_boundary_state
from bilm.training.jax.evaluation import heldout_perplexity
from bilm.training.jax.scalar_log import ScalarLog
from bilm.training.jax.train_step import JaxTrainStep
from bilm.training.run.stop_signals import StopSignals, TrainingInterrupted
from bilm.utils.python_random import seeded_python_random

# The training keys a continued run may change: how long it trains.
LENGTH_KEYS = ("max_steps", "n_epochs", "n_train_tokens")


def _fixed(options):
    return {key: value for key, value in options.items() if key not in LENGTH_KEYS}


def train_on_jax(options, data, save_dir, *, seed=0, max_steps=None, checkpoint_every=1000, heldout_data=None,
                 save_on_signals=True, devices=None, start_state=None, restart=None, log_dir=None,
                 summary_every=10, verbose=1):
    """Trains the biLM of `options` on `data`, continuing the checkpoint in `save_dir` if there is one.

    Args:
        options: the training options (an options file, dict or
            `BiLMOptions`) with `n_tokens_vocab` and `n_train_tokens` set.
        data: a `BidirectionalLMDataset` (or `LMDataset` for a forward-only
            model) shuffled with `seed`: a restart skips the batches already
            trained on.
        save_dir: the run's directory: `options.json` and the checkpoint
            (`bilm.training.jax.checkpoints`). A checkpoint there continues
            exactly, if its options are these.
        seed: the run's seed: the step's dropout masks and negatives, the
            softmax's start, and the network's initial weights (the ones
            `keras.utils.set_random_seed(seed)` gives, as
            `bilm.training.train` seeds them, but without reseeding the
            process's generators: `bilm.utils.python_random`).
        max_steps: stop after this many steps of this call (0: none; None:
            at the run's end), as `bilm.training.train`'s: a call that
            continues a checkpoint at step 40 with `max_steps=10` stops at
            step 50. The run ends after `n_epochs` over `n_train_tokens`, or
            at the training key `max_steps`, whichever comes first; no call
            goes past it.
        checkpoint_every: steps between checkpoints (and one at the end).
            A call that trained (or whose checkpoint has no boundary state
            yet) ends with the boundary state measured on `data`'s text
            (`bilm.training.jax.boundary_state_measure`), which the last
            checkpoint holds and `dump_weights` writes into the weight file.
        heldout_data: a test-mode stream whose perplexity is measured at the
            end (`bilm.training.jax.evaluation.heldout_perplexity`: full
            softmax, no dropout, states carried, windows of one step).
        save_on_signals: SIGINT and SIGTERM save the step reached and raise
            `TrainingInterrupted`; one during the boundary state's measure
            stops it (the checkpoint keeps the boundary state it had).
        devices: the JAX devices to train on, `batch_size` rows each (None:
            the first device); see `JaxTrainStep`.
        start_state: for a new run (no checkpoint in `save_dir`), a callable
            `(JaxTrainStep, state) -> state` that changes the initial state
            (`JaxTrainStep.initial_state`) before the first step, e.g. to
            start from a published model's weights; a restart ignores it
            (the checkpoint holds what it set).
        restart: True continues the checkpoint in `save_dir` and refuses a
            `save_dir` without one; False starts a new run and refuses a
            `save_dir` with one; None (the default) continues a checkpoint
            if there is one, else starts. Checked while this call holds
            `save_dir`'s writer lock, so no other process's run comes in
            between (`checkpoints.check_run_kind`).
        log_dir: a folder for TensorBoard's scalars, the tags TensorFlow's
            loop writes (`train_perplexity`, `gradient_norm`,
            `learning_rate` every `summary_every` steps, and
            `heldout_perplexity`), in a new event file of this call
            (`bilm.training.jax.scalar_log`); None writes none.
        summary_every: steps between the scalars.
        verbose: 0 silent, 1 a line every 100 steps and at the end.

    Returns:
        dict: `steps` (taken in all, since the run's start), `steps_taken`
        (by this call), `finished` (the run reached its end), `loss` (the
        last step's), `tokens_per_second` (this call's text tokens a
        second, compilation included: a step reads `batch_size x
        unroll_steps` tokens per device, whatever the directions, as
        TensorFlow's progress line counts them),
        `checkpoint` (its path) and with `heldout_data` `heldout_perplexity`.
    """
    options = load_options(options)
    options_dict = options.raw
    _, settings = training_settings(options_dict)
    check_output_directory(save_dir)
    with writer_lock(save_dir):  # one writer at a time
        return _train(options, options_dict, settings, data, save_dir, seed, max_steps, checkpoint_every,
                      heldout_data, save_on_signals, devices, start_state, restart, (log_dir, summary_every),
                      verbose)


def _train(options, options_dict, settings, data, save_dir, seed, max_steps, checkpoint_every, heldout_data,
           save_on_signals, devices, start_state, restart, logging, verbose):
    meta = checkpoints.read_meta(save_dir)
    checkpoints.check_run_kind(save_dir, meta, restart)
    if meta is not None and (_fixed(meta["options"]) != _fixed(options_dict) or meta["seed"] != seed):
        changed = sorted(key for key in set(meta["options"]) | set(options_dict)
                         if key not in LENGTH_KEYS and meta["options"].get(key) != options_dict.get(key))
        raise UserError(f"{checkpoints.checkpoint_path(save_dir)} continues another run (it differs in "
                        f"{', '.join(changed) or 'seed'}); give another save_dir, or the run's options and seed to "
                        f"continue it (only {', '.join(LENGTH_KEYS)} may change).")
    with StopSignals(save_on_signals, interruptible_phases=False) as signals:
        scalar_log = ScalarLog(logging[0], logging[1], settings.learning_rate)
        try:
            result = _run(options, options_dict, settings, data, save_dir, seed, max_steps, checkpoint_every,
                          heldout_data, devices, start_state, verbose, meta, signals, scalar_log)
        except BaseException:
            scalar_log.close(after_error=True)
            raise
        scalar_log.close()
        return result


def _run(options, options_dict, settings, data, save_dir, seed, max_steps, checkpoint_every, heldout_data, devices,
         start_state, verbose, meta, signals, scalar_log):
    """`_train` within its signal handlers: a signal is acted on between JAX's calls, never inside one (an
    exception raised in the middle of an XLA compilation can crash the interpreter at its exit)."""
    checkpoint = checkpoints.checkpoint_path(save_dir)
    continue_with = f"the same train_on_jax call (save_dir={save_dir!r})"

    def stop_if_signalled(step, phase, kept=None):
        if signals.received is not None:
            raise TrainingInterrupted(signals.received, step, kept, continue_with=continue_with, phase=phase)

    with seeded_python_random(seed):  # the network's initial weights, a function of the seed
        step = JaxTrainStep(options, settings, seed, devices)
    state = step.initial_state(softmax_seed=seed)
    taken, boundary_state = 0, None
    if meta is not None:
        state, taken = step.place(checkpoints.load_checkpoint(save_dir, state)), meta["step"]
        boundary_state = checkpoints.read_boundary_state(save_dir)
        stop_if_signalled(taken, "starting", checkpoint)
    else:
        options_file = os.path.join(os.fspath(save_dir), checkpoints.OPTIONS_FILE)
        # A file of that name that holds other options is the user's: never replaced.
        check_output_file(options_file, content=holds_options(options))
        stop_if_signalled(0, "starting")
        if start_state is not None:
            state = step.place(start_state(step, state))
            stop_if_signalled(0, "preparing the run's start")
        save_options(options, options_file)  # after the start: a run stopped before it leaves no options.json
    window = step.global_batch_size * settings.unroll_steps
    run_end = settings.n_epochs * max(1, settings.n_train_tokens // window)
    if settings.max_steps is not None:
        run_end = min(run_end, settings.max_steps)
    total = run_end if max_steps is None else min(run_end, taken + max_steps)
    batches = data.iter_batches(step.global_batch_size, settings.unroll_steps, skip=taken)
    metrics, started, first_taken, path = None, time.perf_counter(), taken, None

    def save(boundary_state):
        return checkpoints.save_checkpoint(save_dir, state, taken, options_dict, seed, boundary_state)

    for batch in batches:
        if taken >= total:
            break
        state, metrics = step(state, batch, taken)
        taken += 1
        scalar_log.after_step(taken, metrics)
        if verbose and taken % 100 == 0:
            print(f"step {taken}/{total}: loss {float(metrics['loss']):.4f}", flush=True)
        if signals.received is not None:
            stop_if_signalled(taken, None, save(boundary_state))
        if taken % checkpoint_every == 0:
            path = save(boundary_state)
    if metrics is not None:
        jax.block_until_ready(metrics["loss"])
    seconds = time.perf_counter() - started
    if taken > first_taken or boundary_state is None:
        boundary_state = _measured_boundary_state(step, state, data, verbose)
    path = save(boundary_state)
    stop_if_signalled(taken, "measuring the boundary state", path)
    result = {"steps": taken, "steps_taken": taken - first_taken, "finished": taken >= run_end,
              "loss": None if metrics is None else float(metrics["loss"]), "checkpoint": path,
              "tokens_per_second": (taken - first_taken) * window / max(seconds, 1e-9)}
    if heldout_data is not None:
        result["heldout_perplexity"] = heldout_perplexity(
            step, state, heldout_data,
            between_batches=lambda: stop_if_signalled(taken, "measuring the held-out perplexity", path))
        scalar_log.heldout(taken, result["heldout_perplexity"])
    if verbose:
        heldout = (f"; held-out perplexity {result['heldout_perplexity']:.2f}" if "heldout_perplexity" in result
                   else "")
        print(f"Trained {taken} steps on JAX ({result['tokens_per_second']:,.0f} tokens/sec){heldout}; checkpoint "
              f"{path}.", flush=True)
    return result


def _measured_boundary_state(step, state, data, verbose):
    """The boundary state of `state` on `data`'s text (`measure_boundary_state`); a signal meanwhile waits for
    the measure (bounded: its first sentences), whose result the checkpoint then keeps."""
    if verbose:
        print("Measuring the boundary state on the training text (a forward pass over its first sentences)...",
              flush=True)
    measured = measure_boundary_state(step, state, data)
    if verbose:
        print(f"Boundary state: the mean LSTM state at {measured[1]:,} sentence starts of the training text "
              "(where embedding starts each sentence; see bilm.models.boundary_state).", flush=True)
    return measured
