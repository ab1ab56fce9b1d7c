"""Pretraining a biLM on your own corpus (bilm-tf's `bilm/training.py`, in TF2).

Entry points: `train`, `test`, `dump_weights`, `load_options_latest_checkpoint`,
`load_vocab`. Options are plain dicts (or files) in bilm-tf's format; see
SPEC.md, "Training", for the recipe and `training_model.py` for the model.

`data` is any object with `iter_batches(batch_size, num_steps)` yielding
dicts of int32 arrays: `token_ids` `(batch, time)`, `tokens_characters`
`(batch, time, max_chars)` (unshifted character ids; None for token-only
vocabularies), `next_token_id` `(batch, time)`, and the same keys with
`_reverse` for the backward stream (`bilm.training.windows.BidirectionalLMDataset`).
"""
import collections
import dataclasses
import glob
import json
import math
import os
import shutil
import time
import warnings

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from bilm.io.output_files import check_output_directory, check_output_file
from bilm.io.weight_file import save_bilm_weights, save_token_embeddings
from bilm.ops.matmul_dtype import MATMUL_DTYPES
from bilm.options import BiLMOptions, OptionsError, load_options, save_options
from bilm.presets import TRAINING_DEFAULTS, get_preset
from bilm.training import checkpoints
from bilm.training.checkpoints import CHECKPOINT_NAME, OPTIONS_FILE, CheckpointError
from bilm.training.objective import (
    TRAINING_N_CHARACTERS,
    SparseAdagrad,
    TrainingLM,
    deduplicate,
    global_norm_scale,
    training_settings,
)
from bilm.training.windows import BidirectionalLMDataset, LMDataset, count_tokens, make_tf_dataset
from bilm.training.windows import load_vocab as _load_vocab
from bilm.utils.malloc_tuning import keep_freed_memory
from bilm.utils.progress import Progress

INITIAL_ACCUMULATOR_VALUE = 1.0


def load_vocab(vocab_file, max_word_length=None):
    """A `UnicodeCharsVocabulary` (with `max_word_length`) or a `Vocabulary`, validated."""
    return _load_vocab(vocab_file, max_word_length)


def load_options_latest_checkpoint(save_dir):
    """`(options dict, latest checkpoint prefix)` of a training directory.

    Raises `CheckpointError` when `save_dir` has no checkpoint or no options.json.
    """
    return checkpoints.load_options_latest_checkpoint(save_dir)


def make_strategy(n_gpus=1):
    """The distribution strategy for `n_gpus` on this machine, or for a cluster.

    A `TF_CONFIG` naming more than one worker gives a
    `MultiWorkerMirroredStrategy` (every worker must run the same command);
    otherwise `n_gpus > 1` gives a `MirroredStrategy` over the first
    `n_gpus` GPUs, and one GPU (or none) the default strategy.
    """
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    if sum(len(tasks) for role, tasks in cluster.items() if role in ("chief", "worker")) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if n_gpus > 1:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < n_gpus:
            raise ValueError(f"n_gpus={n_gpus} but this machine shows {len(gpus)} GPU(s): {[g.name for g in gpus]}.")
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus[:n_gpus]])
    return tf.distribute.get_strategy()


def _is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


class TrainStep:
    """One compiled optimizer step over the global batch, for any strategy.

    Replica r takes rows `[r * batch_size, (r + 1) * batch_size)` of the
    global batch and of the LSTM state variables, as bilm-tf's towers did.
    Gradients of `loss * unroll_steps` are averaged over replicas
    (`IndexedSlices` stay sparse), deduplicated, clipped to the global norm
    and applied by `SparseAdagrad`. A step whose loss or gradient norm is
    not finite changes no weight.
    """

    def __init__(self, lm, optimizer, lstm_states, strategy, settings, seed):
        self.lm = lm
        self.optimizer = optimizer
        self.lstm_states = lstm_states
        self.strategy = strategy
        self.settings = settings
        self.seed = int(seed)
        self.variables = lm.trainable_variables()
        self.function = tf.function(self._step, reduce_retracing=True, autograph=False)

    def __call__(self, batch, step):
        """Returns `{"loss", "norm", "forward"[, "backward"]}` scalars."""
        return self.function(batch, tf.constant(step, tf.int64))

    def _step(self, batch, step):
        outputs = self.strategy.run(self._replica_step, args=(batch, step))
        return tf.nest.map_structure(lambda x: self.strategy.experimental_local_results(x)[0], outputs)

    def _replica_step(self, batch, step):
        context = tf.distribute.get_replica_context()
        replica = context.replica_id_in_sync_group
        n_replicas = context.num_replicas_in_sync
        rows = self.settings.batch_size
        start = replica * rows
        local = {key: value[start:start + rows] for key, value in batch.items()}
        initial = {key: state[start:start + rows] for key, state in self.lstm_states.items()}
        seed = tf.random.experimental.stateless_fold_in(
            tf.stack([tf.constant(self.seed, tf.int64), step]), tf.cast(replica, tf.int64))
        names = list(self.variables)
        with tf.GradientTape() as tape:
            loss, per_direction, finals = self.lm.losses(local, initial, training=True, seed=seed)
            scaled_loss = loss * float(self.settings.unroll_steps)
        gradients = tape.gradient(scaled_loss, [self.variables[name] for name in names])
        if n_replicas > 1:
            present = [i for i, g in enumerate(gradients) if g is not None]
            reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [gradients[i] for i in present])
            for i, g in zip(present, reduced):
                gradients[i] = g  # a sum; the scale below takes the mean
            loss, per_direction = context.all_reduce(tf.distribute.ReduceOp.MEAN, (loss, per_direction))
            finals = context.all_gather(finals, axis=0)
        gradients = [deduplicate(g) for g in gradients]
        scale, norm = global_norm_scale(gradients, self.settings.all_clip_norm_val, summed_over=n_replicas)
        # A step with a non-finite loss or norm changes nothing (scale 0).
        finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(norm))
        scale = tf.where(finite, scale, tf.zeros_like(scale))
        context.merge_call(self._apply, args=(dict(zip(names, gradients)), scale, finals))
        return {"loss": loss, "norm": norm, **per_direction}

    def _apply(self, strategy, gradients, gradient_scale, finals):
        self.optimizer.apply(self.variables, gradients, strategy, gradient_scale)
        for key, variable in self.lstm_states.items():
            strategy.extended.update(variable, _assign, args=(finals[key],), group=False)


def _assign(variable, value):
    return variable.assign(value)


# === Data ===

def _describe_data(data):
    """The stream's file pattern (`LMDataset`, `BidirectionalLMDataset`), else its type."""
    for source in (data, getattr(data, "forward", None)):
        pattern = getattr(source, "filepattern", None)
        if isinstance(pattern, (str, os.PathLike)):
            return os.fspath(pattern)
    return type(data).__name__


# === Training ===

@dataclasses.dataclass(frozen=True)
class _Schedule:
    """How many batches make an epoch and the whole run (bilm-tf's arithmetic)."""

    global_batch: int
    tokens_per_batch: int
    batches_per_epoch: int
    batches_total: int

    @classmethod
    def of(cls, options, settings, n_replicas):
        global_batch = settings.batch_size * n_replicas
        tokens_per_batch = global_batch * settings.unroll_steps
        per_epoch = settings.n_train_tokens // tokens_per_batch
        if per_epoch < 1:
            raise OptionsError(
                f"{options.source}: n_train_tokens ({settings.n_train_tokens}) is less than one global batch "
                f"({global_batch} rows x {settings.unroll_steps} steps = {tokens_per_batch} tokens).")
        return cls(global_batch, tokens_per_batch, per_epoch, settings.n_epochs * per_epoch)


class _TrainingRun:
    """What one call of `train` holds: the model, its optimizer state, checkpoints, feedback.

    Variables are created in the strategy's scope; the step counter and the
    data position are plain variables updated from Python.
    """

    def __init__(self, options, settings, strategy, global_batch, save_dir, log_dir, max_to_keep, verbose):
        self.settings = settings
        self.chief = _is_chief(strategy)
        with strategy.scope():
            self.lm = TrainingLM(options, settings)
            self.optimizer = SparseAdagrad(
                self.lm.trainable_variables(), settings.learning_rate, INITIAL_ACCUMULATOR_VALUE)
            self.lstm_states = {
                key: tf.Variable(tf.zeros([global_batch, size]), trainable=False, name=f"state_{key}")
                for key, _, size in self.lm.state_keys}
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.data_position = {"batches": tf.Variable(0, dtype=tf.int64, trainable=False, name="data_batches"),
                              "source": tf.Variable(0, dtype=tf.int64, trainable=False, name="data_source")}
        # Every worker saves (collective variables); only the chief into save_dir.
        self.checkpoint_dir = save_dir if self.chief else os.path.join(
            save_dir, f".worker_{strategy.cluster_resolver.task_id}")
        self.manager = tf.train.CheckpointManager(
            checkpoints.build_checkpoint(self.lm, self.optimizer, self.step, self.lstm_states, self.data_position),
            self.checkpoint_dir, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME)
        self.writer = tf.summary.create_file_writer(log_dir) if (self.chief and log_dir) else None
        self.verbose = verbose and self.chief
        self.progress = None  # while the loop runs, messages go through its progress line
        self.last_saved = None

    @property
    def current_step(self):
        return int(self.step.numpy())

    @property
    def consumed(self):
        """Batches of the current data stream already trained on."""
        return int(self.data_position["batches"].numpy())

    def say(self, message):
        if self.progress is not None:
            self.progress.write(message)
        elif self.verbose:
            print(message)

    def restore(self, ckpt_file, source):
        """Restores a checkpoint; a new data source restarts the stream and the LSTM states."""
        states_restored = checkpoints.restore_training(
            ckpt_file, self.lm, self.optimizer, self.step, self.lstm_states, self.data_position)
        self.say(f"Restored {ckpt_file} (step {self.current_step}).")
        if not states_restored:
            self.say("The saved LSTM states have another number of rows (batch size or replicas changed); "
                     "they start from zeros.")
        if int(self.data_position["source"].numpy()) != source:
            self.say("New training data: starting at its beginning.")
            self.data_position["batches"].assign(0)
            for state in self.lstm_states.values():
                state.assign(tf.zeros_like(state))
        else:
            self.say(f"Same training data: skipping the {self.consumed} batches already consumed.")

    def advance(self):
        self.step.assign_add(1)
        self.data_position["batches"].assign_add(1)

    def save(self):
        self.manager.save(checkpoint_number=self.current_step)
        self.last_saved = self.current_step

    def scalars(self, values):
        if self.writer is not None:
            _write_scalars(self.writer, values, self.current_step)

    def heldout(self, data, batch_size, tag):
        """Held-out perplexity (chief only); None when there is no held-out data."""
        if data is None or not self.chief:
            return None
        perplexity = evaluate(self.lm, data, batch_size)["perplexity"]
        self.say(f"{tag}: held-out perplexity {perplexity:.3f}")
        self.scalars({"heldout_perplexity": perplexity})
        return perplexity

    def close(self):
        if self.writer is not None:
            self.writer.flush()
        if not self.chief:
            shutil.rmtree(self.checkpoint_dir, ignore_errors=True)


def train(options, data, n_gpus, save_dir, log_dir, restart_ckpt_file=None, *,
          heldout_data=None, strategy=None, max_steps=None, checkpoint_every=1250,
          heldout_every=None, heldout_batch_size=None, summary_every=10, seed=0,
          data_source=None, max_to_keep=5, verbose=1):
    """Trains (or continues training) a biLM; writes checkpoints and options.json to `save_dir`.

    Args:
        options: training options dict (or file): the model keys plus
            `n_tokens_vocab`, `batch_size` (per replica), `unroll_steps`,
            `n_train_tokens`, `n_epochs`, `n_negative_samples_batch`, ...
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
        summary_every: TensorBoard scalars every this many steps.
        seed: seeds the global generators (`keras.utils.set_random_seed`:
            initialisation, negative sampling) and the dropout masks.
        data_source: what identifies the stream for restarts (default: the
            data's file pattern).
        max_to_keep: checkpoints kept in `save_dir`.
        verbose: 1 for the progress bar and messages, 0 for silence.

    Returns:
        dict: `step`, `loss` (mean of the last steps), `checkpoint`,
        `seconds`, and `heldout_perplexity` when held-out data was given.

    Raises:
        OptionsError, CheckpointError; FloatingPointError when the loss
        becomes NaN (that step changes no weight; the last good checkpoint
        is kept).
    """
    options, settings = training_settings(options, need_schedule=True)
    keep_freed_memory()
    strategy = strategy or make_strategy(n_gpus)
    schedule = _Schedule.of(options, settings, strategy.num_replicas_in_sync)
    save_dir = os.fspath(save_dir)
    check_output_directory(save_dir)
    if restart_ckpt_file is None and tf.train.latest_checkpoint(save_dir) is not None:
        raise CheckpointError(
            f"{save_dir} already holds checkpoints ({tf.train.latest_checkpoint(save_dir)}). Continue them "
            f"with bin/restart.py --save_dir {save_dir} (train(..., restart_ckpt_file=...)), or choose a new "
            "save_dir.")
    if seed is not None:
        keras.utils.set_random_seed(seed)
    run = _TrainingRun(options, settings, strategy, schedule.global_batch, save_dir, log_dir, max_to_keep, verbose)
    if run.chief:
        save_options(options, os.path.join(save_dir, OPTIONS_FILE))
    source = checkpoints.data_fingerprint(data_source if data_source is not None else _describe_data(data))
    if restart_ckpt_file is not None:
        run.restore(restart_ckpt_file, source)
    run.data_position["source"].assign(source)
    _print_sizes(run.say, run.lm, settings, strategy.num_replicas_in_sync, schedule)

    step_fn = TrainStep(run.lm, run.optimizer, run.lstm_states, strategy, settings, seed or 0)
    heldout_batch_size = heldout_batch_size or settings.batch_size
    stop_at = schedule.batches_total if max_steps is None else min(schedule.batches_total, run.consumed + max_steps)
    recent_losses, recent_seconds = collections.deque(maxlen=20), collections.deque(maxlen=20)
    result, taken, started = {}, 0, time.perf_counter()
    batches = iter(())
    if run.consumed < stop_at:
        batches = iter(make_tf_dataset(
            data, schedule.global_batch, settings.unroll_steps, keys=run.lm.batch_keys(), skip=run.consumed))
        # Counts this stream's batches; its time per batch leaves out the
        # first step, which also traces the step function.
        run.progress = Progress(schedule.batches_total, unit="batch", verbose=run.verbose)
    try:
        for batch in batches:
            tick = time.perf_counter()
            outputs = step_fn(batch, run.current_step)
            loss, norm = float(outputs["loss"]), float(outputs["norm"])
            if not (math.isfinite(loss) and math.isfinite(norm)):
                raise FloatingPointError(_non_finite_message(run, loss, norm, restart_ckpt_file))
            run.advance()
            taken += 1
            recent_losses.append(loss)
            values = [("perplexity", math.exp(np.mean(recent_losses)))]
            if taken > 1:  # the first step of a call also traces the step function
                recent_seconds.append(time.perf_counter() - tick)
                values.append(("tokens/sec", schedule.tokens_per_batch / np.mean(recent_seconds)))
            run.progress.update(run.consumed, values)
            if run.current_step % summary_every == 0:
                run.scalars({"train_perplexity": values[0][1], "gradient_norm": norm,
                             "learning_rate": settings.learning_rate})
            end_of_epoch = run.consumed % schedule.batches_per_epoch == 0
            if end_of_epoch or run.current_step % checkpoint_every == 0:
                run.save()
            if end_of_epoch or (heldout_every and run.current_step % heldout_every == 0):
                tag = (f"Epoch {run.consumed // schedule.batches_per_epoch}" if end_of_epoch
                       else f"Step {run.current_step}")
                result["heldout_perplexity"] = run.heldout(heldout_data, heldout_batch_size, tag)
            if run.consumed >= stop_at:
                break
    finally:
        if run.progress is not None:
            run.progress.close()
            run.progress = None
    if run.last_saved != run.current_step and (taken or run.manager.latest_checkpoint is None):
        run.save()
    run.close()
    if result.get("heldout_perplexity") is None:
        result.pop("heldout_perplexity", None)
    result.update(step=run.current_step, loss=float(np.mean(recent_losses)) if recent_losses else None,
                  checkpoint=os.path.join(save_dir, f"{CHECKPOINT_NAME}-{run.current_step}"),
                  seconds=time.perf_counter() - started, steps_taken=taken,
                  finished=run.consumed >= schedule.batches_total, n_epochs=settings.n_epochs)
    return result


def _non_finite_message(run, loss, norm, restart_ckpt_file):
    last_good = run.manager.latest_checkpoint or restart_ckpt_file
    if last_good:
        advice = f"the last good checkpoint is {last_good}; restart from it"
    else:
        advice = "no checkpoint was saved before it; train again"
    return (f"Training stopped at step {run.current_step + 1}: the loss is {loss} and the gradient norm {norm}. "
            f"No weight was changed by that step and nothing was saved after it; {advice} with a lower "
            "learning_rate or all_clip_norm_val.")


def _write_scalars(writer, scalars, step):
    """TensorBoard scalars through `tf.summary.write` (no `tensorboard` package needed).

    The metadata is what `tf.summary.scalar` writes: the "scalars" plugin
    with the scalar data class.
    """
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR)
    with writer.as_default():
        for name, value in scalars.items():
            tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=metadata)


def _print_sizes(say, lm, settings, n_replicas, schedule):
    """The start-of-training summary: parameters and the big memory items."""
    n_bilm, n_softmax = lm.parameter_counts()
    mib = 4.0 / 2 ** 20
    samples = settings.n_negative_samples_batch if settings.sample_softmax else settings.n_tokens_vocab
    logits = len(lm.directions) * settings.batch_size * settings.unroll_steps * (samples + 1)
    say(f"Parameters: {n_bilm:,} in the biLM, {n_softmax:,} in the softmax, {n_bilm + n_softmax:,} in all.")
    say(f"Memory estimate per replica (float32): softmax {n_softmax * mib:,.1f} MiB, Adagrad "
        f"accumulators {(n_bilm + n_softmax) * mib:,.1f} MiB, softmax logits {logits * mib:,.1f} MiB per step.")
    say(f"{n_replicas} replica(s) x {settings.batch_size} rows x {settings.unroll_steps} steps; "
        f"{schedule.batches_per_epoch} batches per epoch, {schedule.batches_total} in all.")
    if settings.matmul_dtype != "float32":
        say(f"The large matmuls (highway, LSTM input half, softmax) take {settings.matmul_dtype} operands "
            "in training steps (matmul_dtype); weights, optimizer, recurrence and evaluation stay float32.")


# === Evaluation ===

def evaluate(lm, data, batch_size, unroll_steps=1, verbose=0):
    """Full-softmax perplexity of `lm` on a stream that ends (test mode).

    LSTM states start at zero and carry between batches. The loss of a
    batch is the mean of its directions' mean losses; the perplexity is
    `exp` of the mean over batches (as bilm-tf's `test`).

    Returns:
        `{"perplexity", "<direction>_perplexity", "batches"}`.
    """
    step_fn = lm.evaluation_step
    states = lm.zero_states(batch_size)
    totals = collections.defaultdict(float)
    n_batches = 0
    progress = Progress(None, unit="batch", verbose=verbose)
    for batch in make_tf_dataset(data, batch_size, unroll_steps, keys=lm.batch_keys()):
        loss, per_direction, states = step_fn(batch, states)
        n_batches += 1
        totals["loss"] += float(loss)
        for direction, value in per_direction.items():
            totals[direction] += float(value)
        progress.update(n_batches, [("perplexity", math.exp(totals["loss"] / n_batches))])
    progress.close()
    if n_batches == 0:
        raise ValueError(
            f"The evaluation data gave no complete batch of {batch_size} rows x {unroll_steps} steps; "
            "use a smaller batch_size or more data.")
    metrics = {"perplexity": math.exp(totals["loss"] / n_batches), "batches": n_batches}
    for direction in lm.directions:
        metrics[f"{direction}_perplexity"] = math.exp(totals[direction] / n_batches)
    return metrics


def load_training_model(options, ckpt_file):
    """A `TrainingLM` (no dropout) with the weights of a checkpoint."""
    options, settings = training_settings(options, need_schedule=False)
    lm = TrainingLM(options, settings)
    checkpoints.restore_model(lm, ckpt_file)
    return lm


def test(options, ckpt_file, data, batch_size=256, *, unroll_steps=1, verbose=1):
    """Held-out perplexity of a checkpoint (full softmax), as bilm-tf's `test`.

    Args:
        options: the training options (dict or file).
        ckpt_file: checkpoint prefix (see `load_options_latest_checkpoint`).
        data: a stream in test mode (it must end).
        batch_size: rows per batch; `unroll_steps`: window length (1 as bilm-tf).

    Returns:
        float, the average perplexity.
    """
    lm = load_training_model(options, ckpt_file)
    return evaluate(lm, data, batch_size, unroll_steps, verbose=verbose)["perplexity"]


# === Export ===

def dump_weights(save_dir, outfile, options_outfile=None, overwrite=False):
    """Writes the latest checkpoint's biLM as an original-layout HDF5 weight file.

    Beside it go the options for prediction (`n_characters` 262), named
    `<outfile without .hdf5>_options.json` unless `options_outfile` is
    given, and for token inputs the token embedding file
    `<outfile without .hdf5>_token_embeddings.hdf5`, so that
    `BidirectionalLanguageModel(options_file, outfile, ...)` loads them as
    they are. A forward-only model's file has no backward datasets
    (`RNN_1/...`), which `BidirectionalLanguageModel` needs (a warning says so).

    Each file is written under a temporary name and renamed. None may be a
    file of the training directory, and an existing weight or token
    embedding file is only replaced if bilm wrote it as one (or with
    `overwrite=True`); all of this is checked before the checkpoint is read.

    Returns:
        dict with `weight_file`, `options_file` and, for token inputs,
        `embedding_weight_file`.
    """
    ckpt_file = checkpoints.latest_checkpoint(save_dir)
    options = checkpoints.load_training_options(save_dir)
    outfile = os.fspath(outfile)
    stem = outfile[:-5] if outfile.endswith(".hdf5") else outfile
    inputs = [os.path.join(os.fspath(save_dir), OPTIONS_FILE), *glob.glob(glob.escape(ckpt_file) + ".*")]
    check_output_file(outfile, inputs, kind="weights", overwrite=overwrite)
    options_outfile = options_outfile or f"{stem}_options.json"
    check_output_file(options_outfile, inputs + [outfile])
    embedding_file = f"{stem}_token_embeddings.hdf5"
    if options.char_cnn is None:
        check_output_file(embedding_file, inputs, kind="token_embeddings", overwrite=overwrite)
    lm = load_training_model(options, ckpt_file)
    save_bilm_weights(lm.bilm, outfile)
    if "backward" not in lm.directions:
        warnings.warn(f"{save_dir} holds a forward-only biLM: {outfile} has no backward LSTM weights "
                      "(RNN_1/...), so BidirectionalLanguageModel cannot load it.", stacklevel=2)
    written = {"weight_file": outfile}
    if not lm.use_characters:
        table = lm.bilm.get_layer("token_embedding").embeddings.numpy()
        save_token_embeddings(embedding_file, table)
        written["embedding_weight_file"] = embedding_file
    save_options(lm.options.for_prediction(lm.use_characters), options_outfile)
    written["options_file"] = options_outfile
    return written


# === From files (what the bin/ scripts call) ===

def default_training_options(n_tokens_vocab=None):
    """bilm-tf's original configuration for training.

    2x4096_512_2048cnn_2xhighway, bidirectional, dropout 0.1, clip 10,
    10 epochs of batches of 128 x 20, 8192 negative samples, and the
    training character table (`n_characters` 261).
    """
    options = get_preset("original")
    options["char_cnn"]["n_characters"] = TRAINING_N_CHARACTERS
    options.update(TRAINING_DEFAULTS)
    if n_tokens_vocab is not None:
        options["n_tokens_vocab"] = int(n_tokens_vocab)
    return options


def load_training_data(options, filepattern, vocab_file, test=False, seed=0):
    """`(data stream, vocabulary)` for `options` from shard files.

    Character ids when the options have `char_cnn`; both directions
    (`BidirectionalLMDataset`) when `bidirectional` (the default). Training
    streams shuffle with `seed`, so that a restart can skip what was read.
    """
    parsed = load_options(options)
    max_chars = parsed.char_cnn.max_characters_per_token if parsed.char_cnn is not None else None
    vocab = load_vocab(vocab_file, max_chars)
    bidirectional = parsed.get("bidirectional", TRAINING_DEFAULTS["bidirectional"])
    dataset = BidirectionalLMDataset if bidirectional else LMDataset
    return dataset(filepattern, vocab, test=test, shuffle_on_load=not test, seed=seed), vocab


def train_from_files(train_prefix, vocab_file, save_dir, options_file=None, *, restart=False,
                     n_train_tokens=None, n_epochs=None, batch_size=None, matmul_dtype=None, n_gpus=1,
                     heldout_prefix=None, log_dir=None, seed=0, **train_kwargs):
    """`bin/train_elmo.py` (and with `restart=True`, `bin/restart.py`).

    Options come from `options_file`, or `default_training_options()`, or
    on restart from `save_dir`; `n_tokens_vocab` is the vocabulary's size;
    `n_epochs`, `batch_size`, `n_train_tokens` and `matmul_dtype` override them. Without
    `n_train_tokens` (flag or options) the tokens of the shards are
    counted; a restart on other data than before counts them anew.

    Returns:
        `train`'s result dict.
    """
    ckpt_file = None
    data_source = os.path.abspath(train_prefix)
    if restart:
        ckpt_file = checkpoints.latest_checkpoint(save_dir)
    check_output_directory(save_dir)  # before any work
    if restart:
        options = checkpoints.load_training_options(save_dir)
        same_data = checkpoints.read_state_summary(ckpt_file)["data_source"] == (
            checkpoints.data_fingerprint(data_source))
    else:
        options = load_options(options_file) if options_file else BiLMOptions.from_dict(
            default_training_options(), source="the default training options")
        same_data = True
    overrides = {"n_epochs": n_epochs, "batch_size": batch_size, "n_train_tokens": n_train_tokens,
                 "matmul_dtype": matmul_dtype}
    options = options.updated(**{key: value for key, value in overrides.items() if value is not None})
    data, vocab = load_training_data(options, train_prefix, vocab_file, seed=seed)
    if restart and options.get("n_tokens_vocab") != vocab.size:
        raise CheckpointError(
            f"{vocab_file} has {vocab.size} tokens but the checkpoint in {save_dir} was trained with "
            f"n_tokens_vocab={options.get('n_tokens_vocab')}; restart with the training vocabulary.")
    options = options.updated(n_tokens_vocab=vocab.size)
    if n_train_tokens is None and (not same_data or options.get("n_train_tokens") is None):
        options = options.updated(n_train_tokens=count_tokens(train_prefix))
        if train_kwargs.get("verbose", 1):
            print(f"Counted {options.get('n_train_tokens'):,} tokens in {train_prefix}.")
    heldout = None
    if heldout_prefix:
        heldout, _ = load_training_data(options, heldout_prefix, vocab_file, test=True)
    log_dir = log_dir or os.path.join(os.fspath(save_dir), "logs")
    return train(options, data, n_gpus, save_dir, log_dir, restart_ckpt_file=ckpt_file,
                 heldout_data=heldout, seed=seed, data_source=data_source, **train_kwargs)


def test_from_files(test_prefix, vocab_file, save_dir, batch_size=256, verbose=1):
    """`bin/run_test.py`: the average perplexity of `save_dir`'s latest checkpoint."""
    ckpt_file = checkpoints.latest_checkpoint(save_dir)
    options = checkpoints.load_training_options(save_dir)
    data, _ = load_training_data(options, test_prefix, vocab_file, test=True)
    return test(options, ckpt_file, data, batch_size=batch_size, verbose=verbose)


def add_training_arguments(parser):
    """The command-line flags of bin/train_elmo.py and bin/restart.py."""
    parser.add_argument("--train_prefix", required=True, help="glob of the training shards, e.g. 'data/train/*'")
    parser.add_argument("--vocab_file", required=True, help="vocabulary: <S>, </S>, <UNK>, then by frequency")
    parser.add_argument("--save_dir", required=True, help="checkpoints, options.json and logs/")
    parser.add_argument("--n_train_tokens", type=int, help="tokens per epoch (default: counted from the shards)")
    parser.add_argument("--n_epochs", type=int, help="epochs over the training data")
    parser.add_argument("--batch_size", type=int, help="rows per batch and per GPU")
    parser.add_argument("--matmul_dtype", choices=MATMUL_DTYPES,
                        help="bfloat16: the highway, LSTM input-half and softmax matmuls take bfloat16 "
                             "operands, faster where the hardware has bfloat16 matmuls (default: "
                             "float32, the original arithmetic; see bilm.ops.matmul_dtype)")
    parser.add_argument("--n_gpus", type=int, default=1, help="GPUs of this machine (TF_CONFIG for several machines)")
    parser.add_argument("--heldout_prefix", help="glob of held-out shards, evaluated during training")
    parser.add_argument("--heldout_every", type=int, help="also evaluate the held-out data every N steps")
    parser.add_argument("--checkpoint_every", type=int, default=1250, help="save every N steps (and each epoch)")
    parser.add_argument("--log_dir", help="TensorBoard summaries (default: SAVE_DIR/logs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation, shuffling and dropout")


def describe_result(result, save_dir):
    """The closing line of bin/train_elmo.py and bin/restart.py for `train`'s result."""
    if result["steps_taken"] == 0 and result["finished"]:
        n_epochs = result["n_epochs"]
        return (f"Nothing to train: the run in {save_dir} has finished its {n_epochs} epoch(s) (step "
                f"{result['step']}). To train longer on the same data, rerun bin/restart.py with a larger "
                f"--n_epochs (e.g. --n_epochs {2 * n_epochs}); to fine-tune on other text, pass its shards "
                "as --train_prefix.")
    return f"Finished at step {result['step']}: {result['checkpoint']}"


def train_from_args(args, restart=False):
    """`train_from_files` with the flags of `add_training_arguments` (and --options_file)."""
    return train_from_files(
        args.train_prefix, args.vocab_file, args.save_dir, getattr(args, "options_file", None),
        restart=restart, n_train_tokens=args.n_train_tokens, n_epochs=args.n_epochs,
        batch_size=args.batch_size, matmul_dtype=args.matmul_dtype, n_gpus=args.n_gpus,
        heldout_prefix=args.heldout_prefix, heldout_every=args.heldout_every, checkpoint_every=args.checkpoint_every,
        log_dir=args.log_dir, seed=args.seed)
