"""Training a biLM on JAX: the steps of `JaxTrainStep` over a data stream, checkpoints that restart exactly,
SIGINT and SIGTERM saving the step reached, the held-out perplexity, and the weight file.

Needs Keras on JAX (`KERAS_BACKEND=jax`).
"""
import math
import os
import time

import jax
import jax.numpy as jnp
import keras

from bilm.errors import UserError
from bilm.io.formats.output_files import check_output_directory, check_output_file, writer_lock
from bilm.options import holds_options, load_options, save_options
from bilm.training.config.settings import training_settings
from bilm.training.jax import checkpoints
from bilm.training.jax.sampled_softmax import full_softmax_loss
from bilm.training.jax.train_step import SUFFIXES, JaxTrainStep
from bilm.training.run.stop_signals import StopSignals, TrainingInterrupted

# The training keys a continued run may change: how long it trains.
LENGTH_KEYS = ("max_steps", "n_epochs", "n_train_tokens")


def _fixed(options):
    return {key: value for key, value in options.items() if key not in LENGTH_KEYS}


def train_on_jax(options, data, save_dir, *, seed=0, max_steps=None, checkpoint_every=1000, heldout_data=None,
                 save_on_signals=True, devices=None, start_state=None, verbose=1):
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
            softmax's start, and the global generators the network's
            initial weights come from (`keras.utils.set_random_seed`, as
            `bilm.training.train` seeds them).
        max_steps: stop after this many steps in all (None: `n_epochs` over
            `n_train_tokens`).
        checkpoint_every: steps between checkpoints (and one at the end).
        heldout_data: a test-mode stream whose perplexity is measured at the
            end (full softmax, no dropout, states carried).
        save_on_signals: SIGINT and SIGTERM save the step reached and raise
            `TrainingInterrupted`.
        devices: the JAX devices to train on, `batch_size` rows each (None:
            the first device); see `JaxTrainStep`.
        start_state: for a new run (no checkpoint in `save_dir`), a callable
            `(JaxTrainStep, state) -> state` that changes the initial state
            (`JaxTrainStep.initial_state`) before the first step, e.g. to
            start from a published model's weights; a restart ignores it
            (the checkpoint holds what it set).
        verbose: 0 silent, 1 a line every 100 steps and at the end.

    Returns:
        dict: `steps` (taken in all), `loss` (the last step's), `tokens_per_second`,
        `checkpoint` (its path) and with `heldout_data` `heldout_perplexity`.
    """
    options = load_options(options)
    options_dict = options.raw
    _, settings = training_settings(options_dict)
    check_output_directory(save_dir)
    with writer_lock(save_dir):  # one writer at a time
        return _train(options, options_dict, settings, data, save_dir, seed, max_steps, checkpoint_every,
                      heldout_data, save_on_signals, devices, start_state, verbose)


def _train(options, options_dict, settings, data, save_dir, seed, max_steps, checkpoint_every, heldout_data,
           save_on_signals, devices, start_state, verbose):
    meta = checkpoints.read_meta(save_dir)
    if meta is not None and (_fixed(meta["options"]) != _fixed(options_dict) or meta["seed"] != seed):
        changed = sorted(key for key in set(meta["options"]) | set(options_dict)
                         if key not in LENGTH_KEYS and meta["options"].get(key) != options_dict.get(key))
        raise UserError(f"{checkpoints.checkpoint_path(save_dir)} continues another run (it differs in "
                        f"{', '.join(changed) or 'seed'}); give another save_dir, or the run's options and seed to "
                        f"continue it (only {', '.join(LENGTH_KEYS)} may change).")
    keras.utils.set_random_seed(seed)
    step = JaxTrainStep(options, settings, seed, devices)
    state = step.initial_state(softmax_seed=seed)
    taken = 0
    if meta is not None:
        state, taken = step.place(checkpoints.load_checkpoint(save_dir, state)), meta["step"]
    else:
        options_file = os.path.join(os.fspath(save_dir), checkpoints.OPTIONS_FILE)
        # A file of that name that holds other options is the user's: never replaced.
        check_output_file(options_file, content=holds_options(options))
        if start_state is not None:
            state = step.place(start_state(step, state))
        save_options(options, options_file)
    window = step.global_batch_size * settings.unroll_steps
    total = max_steps or settings.max_steps or settings.n_epochs * max(1, settings.n_train_tokens // window)
    batches = data.iter_batches(step.global_batch_size, settings.unroll_steps, skip=taken)
    metrics, started, first_taken, path = None, time.perf_counter(), taken, None
    with StopSignals(save_on_signals) as signals:
        for batch in batches:
            if taken >= total:
                break
            state, metrics = step(state, batch, taken)
            taken += 1
            if verbose and taken % 100 == 0:
                print(f"step {taken}/{total}: loss {float(metrics['loss']):.4f}", flush=True)
            if signals.received is not None:
                path = checkpoints.save_checkpoint(save_dir, state, taken, options_dict, seed)
                raise TrainingInterrupted(signals.received, taken, path,
                                          continue_with=f"the same train_on_jax call (save_dir={save_dir!r})")
            if taken % checkpoint_every == 0:
                path = checkpoints.save_checkpoint(save_dir, state, taken, options_dict, seed)
        if metrics is not None:
            jax.block_until_ready(metrics["loss"])
        seconds = time.perf_counter() - started
        path = checkpoints.save_checkpoint(save_dir, state, taken, options_dict, seed)
        result = {"steps": taken, "loss": None if metrics is None else float(metrics["loss"]), "checkpoint": path,
                  "tokens_per_second": (taken - first_taken) * window * (2 if settings.bidirectional else 1)
                  / max(seconds, 1e-9)}
        if heldout_data is not None:
            with signals.interruptible():
                result["heldout_perplexity"] = heldout_perplexity(step, state, heldout_data)
    if verbose:
        heldout = (f"; held-out perplexity {result['heldout_perplexity']:.2f}" if "heldout_perplexity" in result
                   else "")
        print(f"Trained {taken} steps on JAX ({result['tokens_per_second']:,.0f} tokens/sec){heldout}; checkpoint "
              f"{path}.", flush=True)
    return result


def heldout_perplexity(step, state, data, batch_size=None):
    """`exp` of the mean per-token loss of the biLM in `state` over a test-mode stream: the full softmax, no
    dropout, the LSTM states carried from batch to batch (as `bilm.training.evaluate`'s `"carry"`)."""
    settings, options = step.settings, step.options
    batch_size = batch_size or settings.batch_size
    network, names = step.network, step.input_key

    @jax.jit
    def losses(bilm, non_trainable, softmax, lstm, batch):
        inputs = {names: batch[names], **lstm}
        if "backward" in step.directions:
            inputs[names + "_reverse"] = batch[names + "_reverse"]
        if settings.dropout > 0:
            inputs["dropout_seed"] = jnp.zeros((2,), jnp.int32)
        outputs, _ = network.stateless_call(bilm, non_trainable, inputs, training=False)
        per_direction = []
        for direction in step.directions:
            top = outputs[f"{direction}_{options.n_layers - 1}"].reshape(-1, options.projection_dim)
            labels = batch["next_token_id" + SUFFIXES[direction]].reshape(-1)
            per_direction.append(jnp.mean(full_softmax_loss(softmax["W"], softmax["b"], top, labels)))
        finals = {key: outputs[output_key] for key, output_key, _ in step.state_keys}
        return sum(per_direction) / len(per_direction), finals

    lstm = {key: jnp.zeros((batch_size, size), jnp.float32) for key, _, size in step.state_keys}
    state = jax.device_put({key: state[key] for key in ("bilm", "non_trainable", "softmax")}, step.devices[0])
    total, count = 0.0, 0
    for batch in data.iter_batches(batch_size, settings.unroll_steps):
        batch = {key: jnp.asarray(batch[key]) for key in step.batch_keys()}
        loss, lstm = losses(state["bilm"], state["non_trainable"], state["softmax"], lstm, batch)
        total, count = total + float(loss), count + 1
    if count == 0:
        raise UserError(f"The held-out data holds less than one batch of {batch_size} x {settings.unroll_steps} "
                        "tokens; give more text or a smaller batch.")
    return math.exp(total / count)
