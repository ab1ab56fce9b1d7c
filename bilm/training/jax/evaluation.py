"""Held-out perplexity on JAX and PyTorch with the full softmax, as `bilm.training.run.evaluation` computes it on
TensorFlow: of a training state (`evaluate_state`, and `heldout_perplexity` at a run's end) and of a JAX run's
checkpoint (`evaluate_from_files_on_jax`, what bin/run_test.py runs on JAX).

Needs Keras on JAX or PyTorch (`KERAS_BACKEND=jax` or `torch`).
"""
import collections
import math

from keras import ops

from bilm.errors import UserError
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.jax.boundary_state_measure import measure_boundary_state
from bilm.training.jax.train_step import SUFFIXES, JaxTrainStep
from bilm.training.model.softmax_losses import full_softmax_loss
from bilm.training.run import run_checkpoint
from bilm.training.run.evaluation_starts import OPENING_TOKEN, check_evaluation_start, rows_for_a_short_text
from bilm.utils.progress import Progress


def evaluate_state(step, state, data, batch_size=None, unroll_steps=1, start="carry", boundary_state=None,
                   verbose=0, between_batches=None):
    """Full-softmax perplexity of the biLM in `state` on a stream that ends (test mode), as TensorFlow's
    `evaluate_lm`.

    LSTM states start at zero and carry between batches; no dropout. The
    loss of a batch is the mean of its directions' mean losses; the
    perplexity is `exp` of the mean over batches (as bilm-tf's `test`). A
    text with fewer sentences than `batch_size` is evaluated with one row
    per sentence (and a warning).

    Args:
        step: the model's `JaxTrainStep`.
        state: a state of it (its `bilm`, `non_trainable` and `softmax`
            weights are read).
        data: an `LMDataset` or `BidirectionalLMDataset` in test mode.
        batch_size: rows per batch (None: the run's `batch_size`).
        unroll_steps: the windows' length.
        start: where each sentence starts (`EVALUATION_STARTS` of
            `bilm.training.run.evaluation_starts`); `"zeros"` and `"warm"`
            need `unroll_steps=1`.
        boundary_state: for `"warm"`, `({state key: (size,)}, n_starts)`
            (`run_checkpoint.read_boundary_state`, `measure_boundary_state`).
        verbose: 1 for a progress line.
        between_batches: called with no argument after each batch (e.g. to
            stop on a signal by raising, between the backend's calls rather
            than inside one).

    Returns:
        `{"perplexity", "<direction>_perplexity", "batches"}`.
    """
    check_evaluation_start(start, unroll_steps)
    if start == "warm" and boundary_state is None:
        raise UserError("start='warm' needs the model's boundary state, and it has none yet; measure it with "
                        "bilm.training.jax.boundary_state_measure.measure_boundary_state.")
    batch_size = batch_size or step.settings.batch_size
    keys = step.batch_keys()
    start_states, opening = None, None
    if start != "carry":
        keys += [key for key in ["token_ids" + SUFFIXES[d] for d in step.directions] if key not in keys]
        start_states = {key: (ops.convert_to_tensor(boundary_state[0][key]) if start == "warm"
                              else ops.zeros((size,))) for key, _, size in step.state_keys}
        opening = {direction: getattr(data.vocab, OPENING_TOKEN[direction]) for direction in step.directions}
    losses = _losses_function(step, opening)
    weights = step.placement.first({key: state[key] for key in ("bilm", "non_trainable", "softmax")})
    lstm = {key: ops.zeros((batch_size, size), "float32") for key, _, size in step.state_keys}
    totals = collections.defaultdict(float)
    n_batches = 0
    progress = Progress(None, unit="batch", verbose=verbose)
    for batch in data.iter_batches(batch_size, unroll_steps):
        batch = step.placement.first({key: batch[key] for key in keys})
        loss, per_direction, lstm = losses(weights, lstm, batch, start_states)
        n_batches += 1
        totals["loss"] += float(loss)
        for direction, value in per_direction.items():
            totals[direction] += float(value)
        progress.update(n_batches, [("perplexity", math.exp(totals["loss"] / n_batches))])
        if between_batches is not None:
            between_batches()
    progress.close()
    if n_batches == 0:
        return evaluate_state(step, state, data, rows_for_a_short_text(data, batch_size, unroll_steps),
                              unroll_steps, start, boundary_state, verbose, between_batches)
    metrics = {"perplexity": math.exp(totals["loss"] / n_batches), "batches": n_batches}
    for direction in step.directions:
        metrics[f"{direction}_perplexity"] = math.exp(totals[direction] / n_batches)
    return metrics


def heldout_perplexity(step, state, data, batch_size=None, between_batches=None):
    """The perplexity `evaluate_state` gives with the states carried, in windows of one step: what a run
    prints at its end, as TensorFlow's training does, and what bin/run_test.py gives its checkpoint."""
    return evaluate_state(step, state, data, batch_size, between_batches=between_batches)["perplexity"]


def evaluate_from_files_on_jax(test_prefix, vocab_file, save_dir, batch_size=None, verbose=1, start="carry"):
    """What bin/run_test.py runs on JAX and PyTorch: the average perplexity of the checkpoint in `save_dir`
    on the shards `test_prefix`, as `bilm.training.evaluate_from_files` for TensorFlow's runs.

    Args:
        test_prefix: a glob of the held-out shards.
        vocab_file: the run's vocabulary.
        save_dir: the run's directory (its `checkpoint.npz`, or an earlier
            run's checkpoint: `bilm.training.run.run_checkpoint`).
        batch_size: rows per batch (default: the run's own `batch_size`,
            so that the figure equals the held-out perplexity the run
            printed).
        verbose: 1 for a progress line and a message when a boundary state
            is measured.
        start: see `evaluate_state`; `"warm"` uses the checkpoint's boundary
            state, measured on the evaluation text if it has none.

    Returns:
        float, the average perplexity.
    """
    check_evaluation_start(start, 1)
    meta = run_checkpoint.newest_meta(save_dir)
    if meta is None:
        raise UserError(f"{save_dir} holds no checkpoint ({run_checkpoint.CHECKPOINT_FILE}, or an earlier run's "
                        "jax_checkpoint.npz or model.ckpt-<step>); give the --save_dir of a training run.")
    path = meta["path"]
    options = load_options(meta["options"])
    _, settings = training_settings(meta["options"])
    data, vocab = load_training_data(options, test_prefix, vocab_file, test=True)
    run_checkpoint.check_vocabulary(meta, vocab)
    step = JaxTrainStep(options, settings, meta["seed"] or 0)
    state, _ = run_checkpoint.load_state(save_dir, meta, step.initial_state(), step.network, settings.optimizer)
    boundary_state = run_checkpoint.read_boundary_state(save_dir, meta)
    if start == "warm" and boundary_state is None:
        boundary_state = measure_boundary_state(step, state, data)
        if verbose:
            print(f"{path} holds no boundary state; measured one at "
                  f"{boundary_state[1]:,} sentence starts of the evaluation text.")
    return evaluate_state(step, state, data, batch_size, start=start, boundary_state=boundary_state,
                          verbose=verbose)["perplexity"]


def _losses_function(step, opening):
    """`losses(weights, lstm, batch, start_states) -> (loss, {direction: mean loss}, new lstm)`, compiled: the
    full softmax over each direction's top layer; with `opening` (`{direction: token id}`), the rows whose input
    is their direction's opening token start from `start_states` (`{state key: (size,)}`)."""
    options, settings, network, key = step.options, step.settings, step.network, step.input_key

    def losses(weights, lstm, batch, start_states):
        if opening is not None:
            starts = {d: ops.equal(batch["token_ids" + SUFFIXES[d]][:, :1], token) for d, token in opening.items()}
            lstm = {name: ops.where(starts[name.split("_")[0]], start_states[name], value)
                    for name, value in lstm.items()}
        inputs = {key: batch[key], **lstm}
        if "backward" in step.directions:
            inputs[key + "_reverse"] = batch[key + "_reverse"]
        if settings.dropout > 0:
            inputs["dropout_seed"] = step.backend.random.seed_words(0, 0)
        outputs, _ = network.stateless_call(weights["bilm"], weights["non_trainable"], inputs, training=False)
        per_direction = {}
        for direction in step.directions:
            top = ops.reshape(outputs[f"{direction}_{options.n_layers - 1}"], (-1, options.projection_dim))
            labels = ops.reshape(batch["next_token_id" + SUFFIXES[direction]], (-1,))
            per_direction[direction] = ops.mean(full_softmax_loss(step.softmax_table(weights),
                                                                  weights["softmax"]["b"], top, labels))
        loss = sum(per_direction.values()) / len(per_direction)
        return loss, per_direction, {name: outputs[output_key] for name, output_key, _ in step.state_keys}

    return step.backend.compile_inference(losses)
