"""Training a biLM on JAX: the steps of `JaxTrainStep` driven by the one training loop
(`bilm.training.run.loop.run_steps`) and its policies, as on TensorFlow: checkpoints every N steps, on the clock
and at epoch ends (the last `max_to_keep` kept), held-out evaluation at epoch ends and every N steps, the
progress line and TensorBoard's scalars, SIGINT and SIGTERM saving the step reached, the boundary state
measured at the end.

Needs Keras on JAX or PyTorch (`KERAS_BACKEND=jax` or `torch`).
"""
import os
import warnings

from bilm.backend import training_ops
from bilm.errors import UserError
from bilm.io.formats.output_files import check_output_directory, check_output_file, writer_lock
from bilm.options import holds_options, load_options, save_options
from bilm.training.config.settings import training_settings
from bilm.training.config.training_config import data_fingerprint, describe_data
from bilm.training.jax.train_step import JaxTrainStep
from bilm.training.jax.training_run import JaxTrainingRun
from bilm.training.run import policies, run_checkpoint
from bilm.training.run.driver import check_dtype_policy, run_steps
from bilm.training.run.loop_settings import LoopSettings
from bilm.training.run.policies.policy import LoopContext
from bilm.training.run.run_schedule import SaveTimer, Schedule
from bilm.training.run.run_summary import describe_progress_line, describe_run, describe_warmup
from bilm.training.run.stop_signals import StopSignals, TrainingInterrupted
from bilm.utils.malloc_tuning import keep_freed_memory
from bilm.utils.python_random import seeded_python_random

# The training keys a continued run may change: how long it trains.
LENGTH_KEYS = ("max_steps", "n_epochs", "n_train_tokens")


def _fixed(options):
    return {key: value for key, value in options.items() if key not in LENGTH_KEYS}


def train_on_jax(options, data, save_dir, *, seed=0, max_steps=None, checkpoint_every=1000,
                 checkpoint_every_minutes=30, heldout_data=None, heldout_every=None, heldout_batch_size=None,
                 max_to_keep=5, data_source=None, tune_malloc=False, save_on_signals=True, devices=None,
                 start_state=None, restart=None, log_dir=None, summary_every=10, verbose=1):
    """Trains the biLM of `options` on `data`, continuing the checkpoint in `save_dir` if there is one.

    Args:
        options: the training options (an options file, dict or
            `BiLMOptions`) with `n_tokens_vocab` and `n_train_tokens` set.
        data: a `BidirectionalLMDataset` (or `LMDataset` for a forward-only
            model) shuffled with `seed`: a restart skips the batches already
            trained on.
        save_dir: the run's directory: `options.json` and the checkpoint
            (`bilm.training.run.run_checkpoint`). A checkpoint there continues
            exactly, if its options are these.
        seed: the run's seed: dropout masks, negatives, the softmax's start
            and the network's initial weights (`keras.utils.set_random_seed`'s,
            without reseeding the process: `bilm.utils.python_random`).
        max_steps, checkpoint_every, checkpoint_every_minutes, heldout_every,
            heldout_batch_size, max_to_keep, data_source, tune_malloc,
            summary_every: the loop's settings, as `bilm.training.train`'s
            (`LoopSettings`); the checkpoints kept are `checkpoint.npz`
            and the `max_to_keep - 1` before it (`run_checkpoint.kept_checkpoints`).
            A call that trained (or whose checkpoint has no boundary state
            yet) ends with the boundary state measured on `data`'s text,
            which the last checkpoint holds and `dump_weights` writes.
        heldout_data: a test-mode stream, evaluated at each epoch's end,
            every `heldout_every` steps and at the call's end
            (`bilm.training.jax.evaluation.heldout_perplexity`).
        save_on_signals: SIGINT and SIGTERM save the step reached and raise
            `TrainingInterrupted` (during the boundary state's measure, once
            it is saved).
        devices: the JAX devices to train on, `batch_size` rows each (None:
            the first device); see `JaxTrainStep`.
        start_state: for a new run, a callable `(JaxTrainStep, state) ->
            state` that changes the initial state before the first step (a
            published model's weights); a restart ignores it.
        restart: True continues the checkpoint in `save_dir` (refused
            without one), False starts a new run (refused with one), None
            either; checked under `save_dir`'s writer lock.
        log_dir: TensorBoard's scalars, in a new event file of this call
            (None: none).
        verbose: 0 silent, 1 the progress line and messages, as on TensorFlow.

    Returns:
        `bilm.training.train`'s result dict (`step`, `steps_taken`,
        `finished`, `loss`: the mean of the last steps, `checkpoint`,
        `seconds`, `heldout_perplexity` once measured), with `steps` (=
        `step`) and `tokens_per_second` (this call's text tokens a second,
        compilation included: a step reads `batch_size x unroll_steps`
        tokens per device, whatever the directions, as the progress line
        counts them).
    """
    check_dtype_policy()
    options = load_options(options)
    options_dict = options.raw
    _, settings = training_settings(options_dict)
    note = training_ops().JIT_COMPILE_NOTES.get(settings.jit_compile)
    if note is not None:
        warnings.warn(note, stacklevel=2)
    loop = LoopSettings(max_steps=max_steps, checkpoint_every=checkpoint_every,
                        checkpoint_every_minutes=checkpoint_every_minutes, heldout_every=heldout_every,
                        heldout_batch_size=heldout_batch_size, summary_every=summary_every, seed=seed,
                        max_to_keep=max_to_keep, tune_malloc=tune_malloc, save_on_signals=save_on_signals,
                        verbose=verbose)
    save_timer = SaveTimer(checkpoint_every_minutes)  # the value checked before any work
    if save_on_signals:
        StopSignals.check_main_thread()
    if tune_malloc:
        keep_freed_memory()
    check_output_directory(save_dir)
    source = data_fingerprint(os.fspath(data_source) if data_source is not None else describe_data(data))
    with writer_lock(save_dir):  # one writer at a time
        return _train(options, options_dict, settings, data, save_dir, loop, save_timer, source, heldout_data,
                      devices, start_state, restart, log_dir)


def _train(options, options_dict, settings, data, save_dir, loop, save_timer, source, heldout_data, devices,
           start_state, restart, log_dir):
    meta = run_checkpoint.newest_meta(save_dir)
    run_checkpoint.check_run_kind(save_dir, meta, restart)
    seed = loop.seed
    # A run continued from TensorFlow's checkpoint takes this call's seed (TensorFlow's do not record it).
    if meta is not None and (_fixed(meta["options"]) != _fixed(options_dict) or meta["seed"] not in (None, seed)):
        changed = sorted(key for key in set(meta["options"]) | set(options_dict)
                         if key not in LENGTH_KEYS and meta["options"].get(key) != options_dict.get(key))
        raise UserError(f"{meta['path']} continues another run (it differs in "
                        f"{', '.join(changed) or 'seed'}); give another save_dir, or the run's options and seed to "
                        f"continue it (only {', '.join(LENGTH_KEYS)} may change).")
    with StopSignals(loop.save_on_signals, interruptible_phases=False) as signals:
        return _run(options, options_dict, settings, data, save_dir, loop, save_timer, source, heldout_data,
                    devices, start_state, meta, signals, log_dir)


def _run(options, options_dict, settings, data, save_dir, loop, save_timer, source, heldout_data, devices,
         start_state, meta, signals, log_dir):
    """`_train` within its signal handlers: a signal is acted on between JAX's calls, never inside one (an
    exception raised in the middle of an XLA compilation can crash the interpreter at its exit)."""
    checkpoint = run_checkpoint.checkpoint_path(save_dir) if meta is None else meta["path"]
    continue_with = f"the same train_on_jax call (save_dir={save_dir!r})"
    seed = loop.seed

    def stop_if_signalled(step, phase, kept=None):
        if signals.received is not None:
            raise TrainingInterrupted(signals.received, step, kept, continue_with=continue_with, phase=phase)

    with seeded_python_random(seed):  # the network's initial weights, a function of the seed
        step = JaxTrainStep(options, settings, seed, devices)
    state = step.initial_state(softmax_seed=seed)
    taken, consumed, boundary_state, messages = 0, 0, None, []
    if meta is not None:
        state, lstm_restored = run_checkpoint.load_state(save_dir, meta, state, step.network, settings.optimizer)
        state, taken = step.place(state), meta["step"]
        boundary_state = run_checkpoint.read_boundary_state(save_dir, meta)
        stop_if_signalled(taken, "starting", checkpoint)
        messages.append(f"Restored {checkpoint} (step {taken}).")
        if not lstm_restored:
            messages.append("The saved LSTM states have another number of rows (batch size or devices changed); "
                            "they start from zeros.")
        if meta["data_source"] is not None and meta["data_source"] != source:
            messages.append("New training data: starting at its beginning.")
            state = step.place({**state, "lstm": {key: 0 * value for key, value in state["lstm"].items()}})
        else:
            consumed = meta["data_batches"]
            messages.append(f"Same training data: skipping the {consumed} batches already consumed.")
    else:
        options_file = os.path.join(os.fspath(save_dir), run_checkpoint.OPTIONS_FILE)
        # A file of that name that holds other options is the user's: never replaced.
        check_output_file(options_file, content=holds_options(options))
        stop_if_signalled(0, "starting")
        if start_state is not None:
            state = step.place(start_state(step, state))
            stop_if_signalled(0, "preparing the run's start")
        save_options(options, options_file)  # after the start: a run stopped before it leaves no options.json
    schedule = Schedule.of(settings, len(step.devices))
    run = JaxTrainingRun(step, state, save_dir=save_dir, options=options_dict, seed=seed, taken=taken,
                         consumed=consumed, boundary_state=boundary_state, data_source=source,
                         vocabulary=getattr(getattr(data, "vocab", None), "fingerprint", None),
                         max_to_keep=loop.max_to_keep, stop_signals=signals,
                         restored_from=checkpoint if meta is not None else None, log_dir=log_dir,
                         verbose=loop.verbose, save_timer=save_timer, continue_with=continue_with)
    for message in messages:
        run.report(message)
    describe_run(run.report, step, options, settings, len(step.devices), schedule)
    describe_warmup(run.report, settings, run.current_step)
    describe_progress_line(run.report, settings)
    call_policies = policies.make_policies(LoopContext(loop, settings, schedule, save_timer, signals, heldout_data))

    def batches(skip):
        return data.iter_batches(step.global_batch_size, settings.unroll_steps, skip=skip)

    try:
        result = run_steps(run, run.take_step, batches, data, schedule, loop.max_steps, call_policies, signals)
    finally:
        run.close()
    tokens = result["steps_taken"] * schedule.tokens_per_batch
    return {**result, "steps": result["step"], "tokens_per_second": tokens / max(result["seconds"], 1e-9)}
