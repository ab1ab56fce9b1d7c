"""The training loop (bilm-tf's `train`), on every backend: a short loop over a step, with the policies around it.

`data` is any object with `iter_batches(batch_size, num_steps)` yielding
dicts of int32 arrays: `token_ids` `(batch, time)`, `token_characters`
`(batch, time, max_chars)` (unshifted character ids; None for token-only
vocabularies), `next_token_id` `(batch, time)`, and the same keys with
`_reverse` for the backward stream (`bilm.training.BidirectionalLMDataset`).

`train` resolves what it is given into a `TrainingConfig` (every check,
once) and a `LoopSettings`, and `run_training` runs them: the backend's
trainer (`bilm.backend.trainer_module`: TensorFlow's strategy, or JAX's and
PyTorch's devices) opens the call's run, the run's origin (`run_origin`)
sets its state up, then the call's steps run, from the batches already
consumed to its end (the run's end, or `max_steps` batches on), each
followed by the registered policies (`bilm.training.run.policies`: the
progress line, a stop on signals, the periodic saves, the held-out
evaluation), whose `Action`s the loop carries out
(`bilm.training.run.driver.run_steps`). At the end of a call that trained,
the boundary state is measured and a last checkpoint saved.
"""
import contextlib
import os

from bilm.backend import trainer_module
from bilm.io.formats.output_files import check_output_directory, check_output_file, writer_lock
from bilm.models.functional_bilm import WEIGHTS_FOLLOW
from bilm.options import holds_options, save_options
from bilm.training.config.training_config import resolve_training_config
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT
from bilm.training.run import policies, run_checkpoint, run_directory
from bilm.training.run.driver import NonFiniteLossError, check_dtype_policy, run_steps
from bilm.training.run.loop_settings import LoopSettings
from bilm.training.run.policies.policy import LoopContext
from bilm.training.run.run_origin import run_origin
from bilm.training.run.run_schedule import SaveTimer, Schedule
from bilm.training.run.run_summary import describe_progress_line, describe_run, describe_warmup
from bilm.training.run.stop_signals import StopSignals, TrainingInterrupted
from bilm.utils.malloc_tuning import keep_freed_memory

__all__ = ["LoopSettings", "NonFiniteLossError", "TrainingInterrupted", "run_steps", "run_training", "train"]


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
        n_gpus: replicas on this machine, `batch_size` rows each: GPUs on
            TensorFlow (ignored when `strategy` is given), devices of the
            default kind on JAX and PyTorch.
        save_dir: checkpoints and `options.json`.
        log_dir: TensorBoard summaries (None: none).
        restart_ckpt_file: continue from this checkpoint in `save_dir` (or
            `save_dir` itself: its newest), optimizer state included. On the
            same data (`data_source`) the stream skips the batches consumed;
            on new data it starts at its beginning and runs `n_epochs` over it.
        heldout_data: optional held-out stream (test mode, so it ends),
            evaluated every `heldout_every` steps and at each epoch's end
            with `heldout_batch_size` rows (default `batch_size`).
        strategy: TensorFlow's `tf.distribute.Strategy` (default: `make_strategy(n_gpus)`).
        max_steps: stop after this many steps of this call (then save).
        checkpoint_every: save every this many steps and at each epoch's end
            (a call that trained ends with the boundary state measured).
        checkpoint_every_minutes: also save after the first step that starts
            this many minutes or more after the last save (None: only by
            steps). With several workers, when the first worker's time is up.
        summary_every: TensorBoard scalars every this many steps.
        seed: seeds the global generators (`keras.utils.set_random_seed`:
            initialisation, negative sampling) and the dropout masks.
        data_source: a label that identifies the stream for restarts (default: its shards, `data_fingerprints`).
        max_to_keep: checkpoints kept in `save_dir`.
        tune_malloc: first call `bilm.utils.malloc_tuning.keep_freed_memory`
            (glibc keeps freed memory for reuse: faster steps, a higher peak);
            process-wide, so for callers that own the process (`bin/`).
        init_from: a published model to start from (anything `bilm.load`
            opens; `bilm.training.model.adaptation`): its architecture and
            weights, a new softmax over `data`'s vocabulary; options that
            contradict it are an `AdaptationError`. Not with a restart.
        softmax_init: with `init_from`, where the new softmax starts
            (`bilm.training.model.softmax_init.SOFTMAX_INITS`): `"fit"` to the
            model's outputs on the start of `data`, `"encoding"` from each
            word's encoding by the model, or `"random"` as from scratch.
            The training key `softmax_warmup_steps` trains it alone first.
        save_on_signals: SIGINT (Ctrl-C) and SIGTERM (preemption) finish the
            step in progress, save it and raise `TrainingInterrupted`;
            further signals wait for the save; the previous handlers are
            restored at the end. Process-wide and main-thread only, so for
            callers that own the process (`bin/`); without it Ctrl-C raises
            `KeyboardInterrupt` at once. With several workers a signal to
            any of them stops all at the same step.
        verbose: 1 for the progress bar and messages, 0 for silence.

    Returns:
        dict: `step`, `loss` (mean of the last steps), `checkpoint`, `seconds`, `tokens_per_second`,
        and `heldout_perplexity` when held-out data was given.

    Raises:
        OptionsError, CheckpointError, AdaptationError; NonFiniteLossError (a FloatingPointError) when the loss
        becomes NaN (that step changes no weight; the last good checkpoint
        is kept); TrainingInterrupted (see `save_on_signals`).
    """
    check_dtype_policy()
    origin = run_origin(restart_ckpt_file, init_from, softmax_init)
    config = resolve_training_config(origin.options(options), data, origin, data_source=data_source, verbose=verbose)
    loop_settings = LoopSettings(
        max_steps=max_steps, checkpoint_every=checkpoint_every, checkpoint_every_minutes=checkpoint_every_minutes,
        heldout_every=heldout_every, heldout_batch_size=heldout_batch_size, summary_every=summary_every, seed=seed,
        max_to_keep=max_to_keep, tune_malloc=tune_malloc, save_on_signals=save_on_signals, verbose=verbose)
    return run_training(config, data, n_gpus, save_dir, log_dir, loop_settings, heldout_data=heldout_data,
                        strategy=strategy)


def run_training(config, data, n_gpus, save_dir, log_dir, loop_settings=LoopSettings(), *, heldout_data=None,
                 strategy=None):
    """Trains the run `config` (a `TrainingConfig`) describes, as `loop_settings` (a `LoopSettings`) says; the
    other arguments are `train`'s (`strategy`: TensorFlow's alone)."""
    settings, loop = config.settings, loop_settings
    check_dtype_policy()
    save_timer = SaveTimer(loop.checkpoint_every_minutes)
    if loop.save_on_signals:
        StopSignals.check_main_thread()
    checkpoint = config.origin.checkpoint
    if checkpoint is not None and os.path.dirname(os.path.abspath(checkpoint)) != os.path.abspath(save_dir):
        raise run_checkpoint.CheckpointError(
            f"A run continues the checkpoint in its save_dir, and {checkpoint} is not in {os.fspath(save_dir)}; give "
            "save_dir the run's directory (to branch a run off, copy its checkpoint and options.json to a new one).")
    trainer = trainer_module().Trainer(config, n_gpus, strategy)  # what cannot apply is refused here
    if loop.tune_malloc:
        keep_freed_memory()
    save_dir = os.fspath(save_dir)
    check_output_directory(save_dir)
    # One run writes a save_dir at a time: a second process's run is refused here, in one line naming the
    # first one's PID, before it reads or writes anything of the directory (only the chief writes).
    with writer_lock(save_dir) if trainer.chief else contextlib.nullcontext():
        return _run_in(trainer, config, data, save_dir, log_dir, loop, Schedule.of(settings, trainer.n_replicas),
                       save_timer, heldout_data)


def _run_in(trainer, config, data, save_dir, log_dir, loop, schedule, save_timer, heldout_data):
    """`run_training`'s work, in a checked `save_dir` that this process holds."""
    origin, settings = config.origin, config.settings
    options_file = os.path.join(save_dir, run_checkpoint.OPTIONS_FILE)
    if origin.checkpoint is None:  # a new run never continues another one, nor replaces a file of the user's
        run_directory.check_new_run(save_dir)
        check_output_file(options_file, content=holds_options(config.options))
    with StopSignals(loop.save_on_signals, interruptible_phases=trainer.interruptible_phases) as stop_signals:
        # A restart's checkpoint sets every weight: the model is built without drawing any.
        with WEIGHTS_FOLLOW.on() if origin.checkpoint is not None else contextlib.nullcontext():
            run = trainer.open_run(config, save_dir, log_dir, loop, save_timer, stop_signals)
        try:
            origin.begin(run, data, stop_signals)
            if stop_signals.received is not None:  # during the start: nothing trained, the checkpoint as it was
                raise TrainingInterrupted(stop_signals.received, run.current_step, origin.checkpoint,
                                          phase="starting")
            if run.chief:  # once the run has started: a run stopped before leaves no options.json
                save_options(config.options, options_file)
            describe_run(run.report, run.model, config.options, settings, trainer.n_replicas, schedule)
            describe_warmup(run.report, settings, run.current_step)
            describe_progress_line(run.report, settings)
            call_policies = policies.make_policies(
                LoopContext(loop, settings, schedule, save_timer, stop_signals, heldout_data))
            return run_steps(run, run.step_function(loop.seed or 0), lambda skip: run.batches(data, skip), data,
                             schedule, loop.max_steps, call_policies, stop_signals)
        finally:
            run.close()
