"""Held-out perplexity of the array step's state with the full softmax, as bilm-tf's `test` computes it: of a
training state (`evaluate_state`, or `evaluate_starts` for several starts; `heldout_perplexity` during a run),
and so of a checkpoint, what `bilm.training.evaluate` and bin/run_test.py give
(`bilm.training.arrays.training_run.evaluate_checkpoint`).

Runs on Keras's TensorFlow, JAX and PyTorch backends.
"""

from keras import ops

from bilm.backend.direct_call import stateless_direct_call
from bilm.errors import UserError
from bilm.training.arrays.train_step import SUFFIXES
from bilm.training.model.softmax_losses import full_softmax_loss
from bilm.training.run.evaluation_starts import (
    OPENING_TOKEN,
    checked_starts,
    evaluation_metrics,
    rows_for_a_short_text,
)


def evaluate_state(step, state, data, batch_size=None, unroll_steps=1, start="carry", boundary_state=None,
                   verbose=0, between_batches=None):
    """Full-softmax perplexity of the biLM in `state` on a stream that ends (test mode).

    LSTM states start at zero and carry between batches; no dropout. The
    loss of a batch is the mean of its directions' mean losses; the
    perplexity is `exp` of the mean over batches (as bilm-tf's `test`). A
    text with fewer sentences than `batch_size` is evaluated with one row
    per sentence (and a warning).

    Args:
        step: the model's `ArrayTrainStep`.
        state: a state of it (its `bilm`, `non_trainable` and `softmax`
            weights are read).
        data: an `LMDataset` or `BidirectionalLMDataset` in test mode.
        batch_size: rows per batch (None: the run's `batch_size`).
        unroll_steps: the windows' length.
        start: where each sentence starts (`EVALUATION_STARTS` of
            `bilm.training.run.evaluation_starts`); `"zeros"` and `"warm"`
            need `unroll_steps=1`.
        boundary_state: for `"warm"`, `({state key: (size,)}, n_starts)`
            (`run_directory.read_boundary_state`, `measure_boundary_state`).
        verbose: 1 for a progress line.
        between_batches: called with no argument after each batch (e.g. to
            stop on a signal by raising, between the backend's calls rather
            than inside one).

    Returns:
        `{"perplexity", "<direction>_perplexity", "batches"}`.
    """
    return evaluate_starts(step, state, data, (start,), batch_size, unroll_steps, boundary_state, verbose,
                           between_batches)[start]


def evaluate_starts(step, state, data, starts, batch_size=None, unroll_steps=1, boundary_state=None, verbose=0,
                    between_batches=None, first_states=None):
    """`{start: evaluate_state's metrics with that start}` for each of `starts`, one pass over `data` each (the
    other arguments are `evaluate_state`'s), each start's figures the ones `evaluate_state` gives it alone.
    Every start is checked before the first pass; the fixed starts (`"zeros"`, `"warm"`) differ only in an
    argument of the compiled function they share, so the second of them compiles nothing. `first_states`
    (`{state key: (batch_size, size)}`; None: zeros) are the LSTM states the first batch starts from."""
    starts = checked_starts(starts, unroll_steps)
    if "warm" in starts and boundary_state is None:
        raise UserError("start='warm' needs the model's boundary state, and it has none yet; measure it with "
                        "bilm.training.arrays.boundary_state_measure.measure_boundary_state.")
    weights = step.placement.first({key: state[key] for key in ("bilm", "non_trainable", "softmax")})
    functions = {}  # by whether the function resets states at sentence starts
    return {start: _evaluate(step, weights, data, batch_size or step.settings.batch_size, unroll_steps, start,
                             boundary_state, verbose, between_batches, functions, first_states)
            for start in starts}


def _evaluate(step, weights, data, batch_size, unroll_steps, start, boundary_state, verbose, between_batches,
              functions, first_states=None):
    """`evaluate_state`'s metrics of one checked `start`, with `weights` placed; `functions` holds the compiled
    losses of earlier passes (`_losses_function`, by whether they reset states) and gets this pass's."""
    keys = step.batch_keys()
    start_states, opening = None, None
    if start != "carry":
        keys += [key for key in ["token_ids" + SUFFIXES[d] for d in step.directions] if key not in keys]
        start_states = step.placement.first({key: (ops.convert_to_tensor(boundary_state[0][key]) if start == "warm"
                                                   else ops.zeros((size,))) for key, _, size in step.state_keys})
        opening = {direction: getattr(data.vocab, OPENING_TOKEN[direction]) for direction in step.directions}
    resets = opening is not None
    if resets not in functions:
        functions[resets] = _losses_function(step, opening)
    function = functions[resets]
    # Placed as the call's outputs are, which feed the next call: JAX compiles the call once, not again for
    # states on a device after uncommitted zeros.
    lstm = step.placement.first({key: ops.zeros((batch_size, size), "float32") if first_states is None
                                 else ops.convert_to_tensor(first_states[key]) for key, _, size in step.state_keys})

    def losses(batch):
        nonlocal lstm
        loss, per_direction, lstm = function(weights, lstm, step.placement.first({key: batch[key] for key in keys}),
                                             start_states)
        return loss, per_direction

    metrics = evaluation_metrics(data.iter_batches(batch_size, unroll_steps), losses, step.directions, verbose,
                                 between_batches)
    if metrics is None:
        return _evaluate(step, weights, data, rows_for_a_short_text(data, batch_size, unroll_steps), unroll_steps,
                         start, boundary_state, verbose, between_batches, functions)
    return metrics


def heldout_perplexity(step, state, data, batch_size=None, between_batches=None):
    """The perplexity `evaluate_state` gives with the states carried, in windows of one step: what a run
    prints at its end, as TensorFlow's training does, and what bin/run_test.py gives its checkpoint."""
    return evaluate_state(step, state, data, batch_size, between_batches=between_batches)["perplexity"]


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
        outputs = stateless_direct_call(network, weights["bilm"], weights["non_trainable"], inputs, training=False)
        per_direction = {}
        for direction in step.directions:
            top = ops.reshape(outputs[f"{direction}_{options.n_layers - 1}"], (-1, options.projection_dim))
            labels = ops.reshape(batch["next_token_id" + SUFFIXES[direction]], (-1,))
            per_direction[direction] = ops.mean(full_softmax_loss(step.softmax_table(weights),
                                                                  weights["softmax"]["b"], top, labels))
        loss = sum(per_direction.values()) / len(per_direction)
        return loss, per_direction, {name: outputs[output_key] for name, output_key, _ in step.state_keys}

    return step.backend.compile_inference(losses)
