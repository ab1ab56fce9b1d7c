"""The training loop (bilm-tf's `train`): steps, checkpoints, held-out evaluation, TensorBoard.

`data` is any object with `iter_batches(batch_size, num_steps)` yielding
dicts of int32 arrays: `token_ids` `(batch, time)`, `token_characters`
`(batch, time, max_chars)` (unshifted character ids; None for token-only
vocabularies), `next_token_id` `(batch, time)`, and the same keys with
`_reverse` for the backward stream (`bilm.training.BidirectionalLMDataset`).

When to save: every `checkpoint_every` steps, at least every
`checkpoint_every_minutes`, at each epoch's end, at the end of each call,
and, with `save_on_signals`, on SIGINT or SIGTERM (`TrainingInterrupted`).
"""
import collections
import math
import os
import time

import keras
import numpy as np

from bilm.errors import UserError
from bilm.io.output_files import check_output_directory
from bilm.optimizers import OPTIMIZERS
from bilm.options import load_options, save_options
from bilm.training.config.settings import training_settings
from bilm.training.data.shards import count_tokens
from bilm.training.data.tf_dataset import make_tf_dataset
from bilm.training.model.adaptation import adaptation_options, load_model_weights, open_model_to_adapt
from bilm.training.model.boundary_state_measure import measure_boundary_state
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT, check_softmax_init, initialize_softmax
from bilm.training.run import checkpoints
from bilm.training.run.checkpoints import OPTIONS_FILE, CheckpointError
from bilm.training.run.distribution import make_strategy, n_workers
from bilm.training.run.run_schedule import SaveTimer, Schedule
from bilm.training.run.stop_signals import PhaseInterrupted, StopSignals, TrainingInterrupted, agreed_signal
from bilm.training.run.train_step import TrainStep
from bilm.training.run.training_run import TrainingRun
from bilm.utils.malloc_tuning import keep_freed_memory
from bilm.utils.progress import Progress


class NonFiniteLossError(UserError, FloatingPointError):
    """The training loss or gradient norm became NaN or infinite (the message
    says at which step and what to change)."""


def _with_corpus_keys(options, data, verbose):
    """`options` (parsed) with `n_tokens_vocab` and `n_train_tokens` taken from
    `data` (its vocabulary, the tokens of its shards) where they are missing."""
    options = load_options(options)
    keys = {}
    vocab = getattr(data, "vocab", None)
    if options.get("n_tokens_vocab") is None and vocab is not None:
        keys["n_tokens_vocab"] = vocab.size
    pattern = _describe_data(data)
    if options.get("n_train_tokens") is None and pattern != type(data).__name__:
        keys["n_train_tokens"] = count_tokens(pattern)
        if verbose:
            print(f"Counted {keys['n_train_tokens']:,} tokens in {pattern}.")
    return options.updated(**keys) if keys else options


def _describe_data(data):
    """The stream's file pattern (`LMDataset`, `BidirectionalLMDataset`), else its type."""
    for source in (data, getattr(data, "forward", None)):
        pattern = getattr(source, "filepattern", None)
        if isinstance(pattern, (str, os.PathLike)):
            return os.fspath(pattern)
    return type(data).__name__


def train(options, data, n_gpus, save_dir, log_dir, restart_ckpt_file=None, *,
          heldout_data=None, strategy=None, max_steps=None, checkpoint_every=1250,
          checkpoint_every_minutes=30, heldout_every=None, heldout_batch_size=None, summary_every=10, seed=0,
          data_source=None, max_to_keep=5, tune_malloc=False, save_on_signals=False, init_from=None,
          softmax_init=DEFAULT_SOFTMAX_INIT, verbose=1):
    """Trains (or continues training) a biLM; writes checkpoints and options.json to `save_dir`.

    Args:
        options: training options dict (or file): the model keys plus the
            training keys (`batch_size` per replica, `unroll_steps`,
            `n_epochs`, `n_negative_samples_batch`, ...; those left out take
            `bilm.presets.TRAINING_DEFAULTS`). `n_tokens_vocab` defaults to
            the size of `data`'s vocabulary and `n_train_tokens` to the
            tokens of its shards (counted once). With `init_from`, the
            training keys alone (or None): the model keys are the model's.
        data: the training stream (see the module docstring); with
            several workers every worker must read the same stream.
        n_gpus: replicas on this machine (ignored when `strategy` is given).
        save_dir: checkpoints and `options.json`.
        log_dir: TensorBoard summaries (None: none).
        restart_ckpt_file: continue from this checkpoint, optimizer state
            included. On the same data (same `data_source`) the stream
            skips the batches already consumed; on new data it starts at
            its beginning and runs `n_epochs` over it.
        heldout_data: optional held-out stream (test mode, so it ends),
            evaluated every `heldout_every` steps and at each epoch's end
            with `heldout_batch_size` rows (default `batch_size`).
        strategy: a `tf.distribute.Strategy` (default: `make_strategy(n_gpus)`).
        max_steps: stop after this many steps of this call (then save).
        checkpoint_every: save every this many steps (and at each epoch's end).
            At its end every call that trained measures the boundary state
            on the training text (`measure_boundary_state`: where embedding
            starts each sentence) and saves it with a last checkpoint.
        checkpoint_every_minutes: also save after the first step that starts
            this many minutes or more after the last save (None: only by
            steps). With several workers, when the first worker's time is up.
        summary_every: TensorBoard scalars every this many steps.
        seed: seeds the global generators (`keras.utils.set_random_seed`:
            initialisation, negative sampling) and the dropout masks.
        data_source: what identifies the stream for restarts (default: the
            data's file pattern).
        max_to_keep: checkpoints kept in `save_dir`.
        tune_malloc: first call `bilm.utils.malloc_tuning.keep_freed_memory`,
            which sets glibc's malloc to keep freed memory for reuse: faster
            steps on Linux, a higher peak held until the process exits. It
            changes the whole process, so only a caller that owns the
            process should ask for it (`bin/train_elmo.py` and
            `bin/restart.py` do).
        init_from: start a new run from a published model's weights
            (anything `bilm.load` opens: a directory, its options or weight
            file, a zip, a URL, a published name; see
            `bilm.training.model.adaptation`): its architecture, char CNN,
            highway, projection and LSTMs, with a new softmax over `data`'s
            vocabulary. Options that contradict its architecture are an
            `AdaptationError`. Not with `restart_ckpt_file`.
        softmax_init: with `init_from`, where the new softmax starts
            (`bilm.training.model.softmax_init.SOFTMAX_INITS`): `"fit"` to the
            model's outputs on the start of `data`, `"encoding"` from each
            word's encoding by the model, or `"random"` as from scratch.
            The training key `softmax_warmup_steps` trains it alone first.
        save_on_signals: while training, SIGINT (Ctrl-C) and SIGTERM (a
            cluster preempting the job) finish the step in progress, save it
            and raise `TrainingInterrupted`; further signals wait for the
            save. The previous handlers are restored when `train` returns or
            raises. Handlers are process-wide and can only be set in the main
            thread, so it is for callers that own the process (the
            `bin/` scripts); without it Ctrl-C raises `KeyboardInterrupt` at
            once, losing the steps since the last checkpoint. With several
            workers a signal to any of them stops all at the same step.
        verbose: 1 for the progress bar and messages, 0 for silence.

    Returns:
        dict: `step`, `loss` (mean of the last steps), `checkpoint`,
        `seconds`, and `heldout_perplexity` when held-out data was given.

    Raises:
        OptionsError, CheckpointError, AdaptationError; NonFiniteLossError (a FloatingPointError) when the loss
        becomes NaN (that step changes no weight; the last good checkpoint
        is kept); TrainingInterrupted (see `save_on_signals`).
    """
    model = None
    if init_from is not None:
        if restart_ckpt_file is not None:
            raise UserError("init_from starts a new run from a model's weights and restart_ckpt_file continues a "
                            "run from its checkpoint; give one of them.")
        check_softmax_init(softmax_init)
        model = open_model_to_adapt(init_from)
        options = adaptation_options(model, options)
    elif options is None:
        raise UserError("train needs options (the model and training keys), or init_from= a model to adapt.")
    options, settings = training_settings(_with_corpus_keys(options, data, verbose), need_schedule=True)
    save_timer = SaveTimer(checkpoint_every_minutes)
    if save_on_signals:
        StopSignals.check_main_thread()
    if tune_malloc:
        keep_freed_memory()
    strategy = strategy or make_strategy(n_gpus)
    schedule = Schedule.of(settings, strategy.num_replicas_in_sync)
    save_dir = os.fspath(save_dir)
    check_output_directory(save_dir)
    if restart_ckpt_file is None and checkpoints.listed_checkpoints(save_dir):
        raise CheckpointError(
            f"{save_dir} already holds checkpoints ({checkpoints.listed_checkpoints(save_dir)[-1]}). Continue them "
            f"with bin/restart.py --save_dir {save_dir} (train(..., restart_ckpt_file=...)), or choose a new "
            "save_dir.")
    vocabulary = getattr(data, "vocab", None)
    if restart_ckpt_file is not None and vocabulary is not None:
        checkpoints.check_vocabulary(restart_ckpt_file, vocabulary)
    if seed is not None:
        keras.utils.set_random_seed(seed)
    run = TrainingRun(options, settings, strategy, schedule.global_batch, save_dir, log_dir, max_to_keep, verbose,
                       save_timer, vocabulary)
    # Several workers must agree on the step they stop at: a signal then waits for the next step.
    with StopSignals(save_on_signals, interruptible_phases=n_workers(strategy) == 1) as stop_signals:
        return _run(run, options, settings, strategy, schedule, data, stop_signals, restart_ckpt_file=restart_ckpt_file,
                    model=model, softmax_init=softmax_init, data_source=data_source, max_steps=max_steps,
                    checkpoint_every=checkpoint_every, heldout_data=heldout_data, heldout_every=heldout_every,
                    heldout_batch_size=heldout_batch_size or settings.batch_size, summary_every=summary_every,
                    seed=seed)


def _run(run, options, settings, strategy, schedule, data, stop_signals, *, restart_ckpt_file, model, softmax_init,
         data_source, max_steps, checkpoint_every, heldout_data, heldout_every, heldout_batch_size, summary_every,
         seed):
    """The body of `train` once its checks have passed: the run's start, its steps, its end."""
    options_file = os.path.join(run.save_dir, OPTIONS_FILE)
    if run.chief:
        save_options(options, options_file)
    source = checkpoints.data_fingerprint(data_source if data_source is not None else _describe_data(data))
    if restart_ckpt_file is not None:
        run.restore(restart_ckpt_file, source)
    run.data_position["source"].assign(source)
    if model is not None:
        try:
            with stop_signals.interruptible():
                _start_from_model(run, model, data, softmax_init)
        except PhaseInterrupted as interrupted:
            # Nothing trained yet: leave save_dir as it was, so that the same command starts over.
            if run.chief and run.manager.latest_checkpoint is None and os.path.exists(options_file):
                os.remove(options_file)
            run.close()
            raise TrainingInterrupted(interrupted.signal, 0, None, phase="fitting the new softmax") from None
    _print_sizes(run.report, run.lm, options, settings, strategy.num_replicas_in_sync, schedule)
    if run.current_step < settings.softmax_warmup_steps:
        run.report(f"The first {settings.softmax_warmup_steps:,} steps of the run train the softmax alone, the "
                   f"biLM frozen (softmax_warmup_steps; {run.current_step:,} taken).")
    # The progress line shows the training loss's perplexity, which is not the held-out one.
    progress_label = "sampled-softmax perplexity" if settings.sample_softmax else "training perplexity"
    run.report(f"The progress line's {progress_label} is exp(training loss) over the last batches"
               + (f" ({settings.n_negative_samples_batch:,} sampled negatives" if settings.sample_softmax else " (")
               + (", dropout on)" if settings.dropout else ")")
               + ": not comparable with the held-out perplexity of --heldout_prefix and run_test.py (full "
               "softmax, no dropout).")

    step_fn = TrainStep(run.lm, run.optimizer, run.lstm_states, strategy, settings, seed or 0)
    stop_at = schedule.stop_at(run.consumed, run.current_step, max_steps)
    recent_losses, recent_seconds = collections.deque(maxlen=20), collections.deque(maxlen=20)
    result, taken, started = {}, 0, time.perf_counter()
    batches = iter(())
    if run.consumed < stop_at:
        batches = iter(make_tf_dataset(
            data, schedule.global_batch, settings.unroll_steps, keys=run.lm.batch_keys(), skip=run.consumed))
        # Counts this stream's batches; its time per batch leaves out the
        # first step, which also traces the step function.
        run.progress = Progress(schedule.run_end(run.consumed, run.current_step), unit="batch",
                                verbose=run.verbose)
    run.save_timer.reset()
    stop_requested = None  # (signal, by_peer) once every worker knows of a signal
    try:
        for batch in batches:
            tick = time.perf_counter()
            # Flags: SIGINT, SIGTERM, the time interval is up; positive means "on some worker".
            outputs = step_fn(batch, run.current_step, stop_signals.flags() + [float(run.save_timer.due())])
            loss, norm = float(outputs["loss"]), float(outputs["norm"])
            if not (math.isfinite(loss) and math.isfinite(norm)):
                raise NonFiniteLossError(_non_finite_message(run, loss, norm, restart_ckpt_file))
            run.advance()
            taken += 1
            *signal_flags, time_is_up = (float(flag) > 0 for flag in outputs["requests"].numpy())
            stop_requested = agreed_signal(stop_signals.received, signal_flags)
            recent_losses.append(loss)
            values = [(progress_label, math.exp(np.mean(recent_losses)))]
            if taken > 1:  # the first step of a call also traces the step function
                recent_seconds.append(time.perf_counter() - tick)
                values.append(("tokens/sec", schedule.tokens_per_batch / np.mean(recent_seconds)))
            run.progress.update(run.consumed, values)
            if run.current_step % summary_every == 0:
                run.scalars({"train_perplexity": values[0][1], "gradient_norm": norm,
                             "learning_rate": settings.learning_rate})
            if stop_requested and run.consumed < stop_at:
                break  # run.stop saves without the periodic save or evaluation
            end_of_epoch = run.consumed % schedule.batches_per_epoch == 0
            if end_of_epoch or time_is_up or run.current_step % checkpoint_every == 0:
                run.save()
            if end_of_epoch or (heldout_every and run.current_step % heldout_every == 0):
                tag = (f"Epoch {run.consumed // schedule.batches_per_epoch}" if end_of_epoch
                       else f"Step {run.current_step}")
                try:
                    with stop_signals.interruptible():
                        result["heldout_perplexity"] = run.heldout(heldout_data, heldout_batch_size, tag)
                except PhaseInterrupted as interrupted:
                    run.report(f"{interrupted.signal.name}: held-out evaluation stopped.")
                    stop_requested = interrupted.signal, False
                    break
            if run.consumed >= stop_at:
                break
    finally:
        if run.progress is not None:
            run.progress.close()
            run.progress = None
    if stop_requested and run.consumed < stop_at:
        raise run.stop(*stop_requested)
    # At the run's end: the boundary state and the last save. A signal
    # during the last step waits for them; one during the measure stops it
    # (the checkpoint then keeps the boundary state it had).
    if taken or int(run.lm.n_boundary_starts.numpy()) == 0:
        try:
            with stop_signals.interruptible():
                n_starts = measure_boundary_state(run.lm, data)
            run.report(f"Boundary state: the mean LSTM state at {n_starts:,} sentence starts of the training "
                       "text (where embedding starts each sentence; see bilm.models.boundary_state).")
        except PhaseInterrupted as interrupted:
            run.report(f"{interrupted.signal.name}: the boundary state was not measured (the checkpoint keeps the "
                       "one it had, if any; a restart that trains measures it).")
            raise run.stop(interrupted.signal, False) from None
        run.save()
    elif run.manager.latest_checkpoint is None:
        run.save()
    if stop_requested is None and stop_signals.received is not None:
        stop_requested = stop_signals.received, False
    if stop_requested:
        raise run.stop(*stop_requested)
    run.close()
    if result.get("heldout_perplexity") is None:
        result.pop("heldout_perplexity", None)
    result.update(step=run.current_step, loss=float(np.mean(recent_losses)) if recent_losses else None,
                  checkpoint=run.checkpoint_path(), seconds=time.perf_counter() - started, steps_taken=taken,
                  finished=schedule.finished(run.consumed, run.current_step), n_epochs=settings.n_epochs)
    return result


def _start_from_model(run, model, data, softmax_init):
    """Loads the model to adapt into the new run's biLM and initialises its softmax."""
    load_model_weights(run.lm, model)
    run.report(f"Adapting {model.source} ({model.files.weight_file}): char CNN, highway, projection and LSTM "
               "weights loaded; a new softmax over the training vocabulary.")
    started = initialize_softmax(run.lm, data, softmax_init)
    if softmax_init == "random":
        run.report("The softmax starts random (softmax_init='random'), as from scratch.")
    else:
        run.report(f"The softmax starts from the model's {'outputs' if softmax_init == 'fit' else 'encodings'} "
                   f"(softmax_init={softmax_init!r}, fitted on {started['positions']:,} positions of the training "
                   f"text). Full-softmax perplexity on positions kept apart: {started['frequency_perplexity']:.2f} "
                   f"with the words' frequencies in its bias, against {started['unigram_perplexity']:.2f} for the "
                   f"frequencies alone; it starts without them ({started['sample_perplexity']:.2f}), which trains "
                   "faster and the first steps learn (see bilm.training.model.softmax_init).")


def _non_finite_message(run, loss, norm, restart_ckpt_file):
    last_good = run.manager.latest_checkpoint or restart_ckpt_file
    if last_good:
        advice = f"the last good checkpoint is {last_good}; restart from it"
    else:
        advice = "no checkpoint was saved before it; train again"
    return (f"Training stopped at step {run.current_step + 1}: the loss is {loss} and the gradient norm {norm}. "
            f"No weight was changed by that step and nothing was saved after it; {advice} with a lower "
            "learning_rate or all_clip_norm_val.")


def _print_sizes(report, lm, options, settings, n_replicas, schedule):
    """The start-of-training summary: parameters, the big memory items, how long the run is."""
    n_bilm, n_softmax = lm.parameter_counts()
    mib = 4.0 / 2 ** 20
    samples = settings.n_negative_samples_batch if settings.sample_softmax else settings.n_tokens_vocab
    logits = len(lm.directions) * settings.batch_size * settings.unroll_steps * (samples + 1)
    report(f"Parameters: {n_bilm:,} in the biLM, {n_softmax:,} in the softmax, {n_bilm + n_softmax:,} in all.")
    slots = OPTIMIZERS[settings.optimizer].slots_per_variable
    report(f"Memory estimate per replica (float32): softmax {n_softmax * mib:,.1f} MiB, {settings.optimizer} "
        f"state {slots * (n_bilm + n_softmax) * mib:,.1f} MiB, softmax logits {logits * mib:,.1f} MiB per step.")
    epochs = (f"{settings.n_epochs} epoch(s)" if "n_epochs" in options.raw
              else f"{settings.n_epochs} epochs (the default n_epochs; --n_epochs or --max_steps to change)")
    bound = f", at most {settings.max_steps:,} steps in all (max_steps)" if settings.max_steps else ""
    report(f"{n_replicas} replica(s) x {settings.batch_size} rows x {settings.unroll_steps} steps; "
        f"{schedule.batches_per_epoch} batches per epoch, {epochs}: {schedule.batches_total} batches{bound}.")
    if settings.matmul_dtype != "float32":
        report(f"The large matmuls (highway, LSTM input half, softmax) take {settings.matmul_dtype} operands "
            "in training steps (matmul_dtype); weights, optimizer, recurrence and evaluation stay float32.")
