"""Held-out perplexity with the full softmax: of a model (`evaluate_lm`) and of a checkpoint (`evaluate`).

`evaluate` is bilm-tf's `test` under a name pytest does not collect;
`test` stays as its deprecated alias.
"""
import warnings

import tensorflow as tf

from bilm.errors import UserError
from bilm.training.model.boundary_state_measure import measure_boundary_state
from bilm.training.run.evaluation_starts import (  # noqa: F401
    EVALUATION_STARTS,
    OPENING_TOKEN,
    check_evaluation_start,
    checked_starts,
    evaluation_metrics,
    figures_as_asked,
    rows_for_a_short_text,
)
from bilm.training.tensorflow import checkpoints
from bilm.training.tensorflow.tf_dataset import make_tf_dataset


def evaluate_lm(lm, data, batch_size, unroll_steps=1, verbose=0, start="carry"):
    """Full-softmax perplexity of `lm` on a stream that ends (test mode).

    LSTM states start at zero and carry between batches. The loss of a
    batch is the mean of its directions' mean losses; the perplexity is
    `exp` of the mean over batches (as bilm-tf's `test`).

    Args:
        start: where each sentence starts (`EVALUATION_STARTS`, see
            `bilm.training.run.evaluation_starts`): `"carry"`
            from the state the previous sentence of its row left, as in
            training; `"zeros"` or `"warm"` (`lm.boundary_state`) from a
            fixed state, as embedding does (these need `unroll_steps=1`).

    A text with fewer sentences than `batch_size` is evaluated with one
    row per sentence (and a warning).

    Returns:
        `{"perplexity", "<direction>_perplexity", "batches"}`.
    """
    check_evaluation_start(start, unroll_steps)
    if start == "warm" and int(lm.n_boundary_starts.numpy()) == 0:
        raise UserError("start='warm' needs the model's boundary state, and it has none yet; measure it with "
                         "bilm.training.model.boundary_state_measure.measure_boundary_state.")
    step_fn = lm.evaluation_step
    states = lm.zero_states(batch_size)
    keys = lm.batch_keys()
    if start != "carry":
        opening_ids = ["token_ids"] + (["token_ids_reverse"] if "backward" in lm.directions else [])
        keys += [key for key in opening_ids if key not in keys]
        start_states = {key: (lm.boundary_state[key] if start == "warm" else tf.zeros([size]))
                        for key, _, size in lm.state_keys}
        opening = {direction: getattr(data.vocab, OPENING_TOKEN[direction]) for direction in lm.directions}

    def losses(batch):
        nonlocal states
        if start != "carry":
            states = _reset_at_sentence_starts(states, batch, start_states, opening)
        loss, per_direction, states = step_fn(batch, states)
        return loss, per_direction

    metrics = evaluation_metrics(make_tf_dataset(data, batch_size, unroll_steps, keys=keys), losses, lm.directions,
                                 verbose)
    if metrics is None:
        return evaluate_lm(lm, data, rows_for_a_short_text(data, batch_size, unroll_steps), unroll_steps, verbose,
                           start)
    return metrics


def _reset_at_sentence_starts(states, batch, start_states, opening):
    """The rows whose input is their direction's opening token start from `start_states`."""
    starts = {direction: tf.equal(batch["token_ids" + ("_reverse" if direction == "backward" else "")][:, 0],
                                  token_id)[:, tf.newaxis]
              for direction, token_id in opening.items()}
    return {key: tf.where(starts[key.split("_")[0]], start_states[key], state) for key, state in states.items()}


def evaluate(options, ckpt_file, data, batch_size=256, *, unroll_steps=1, verbose=1, start="carry"):
    """Held-out perplexity of a checkpoint (full softmax), as bilm-tf's `test`.

    Args:
        options: the training options (dict or file).
        ckpt_file: a checkpoint's path (as `load_options_latest_checkpoint` returns it).
        data: a stream in test mode (it must end).
        batch_size: rows per batch; `unroll_steps`: window length (1 as bilm-tf).
        start: where each sentence's LSTM states start, see `evaluate_lm`;
            or a list or tuple of starts, each evaluated in its own pass over
            `data`, the checkpoint loaded once. A checkpoint whose boundary
            state is not measured yet (one converted from TF1 by
            `convert_tf1_checkpoint`) gets one measured on `data` for
            `"warm"`.

    Returns:
        float, the average perplexity; for a list or tuple of starts,
        `{start: average perplexity}`, each the figure that start gives alone.
    """
    starts = checked_starts(start, unroll_steps)
    lm = checkpoints.load_training_model(options, ckpt_file)
    if "warm" in starts and int(lm.n_boundary_starts.numpy()) == 0:
        n_starts = measure_boundary_state(lm, data)
        if verbose:
            print(f"{ckpt_file} holds no boundary state; measured one at {n_starts:,} sentence starts of the "
                  "evaluation text.")
    return figures_as_asked(start, {each: evaluate_lm(lm, data, batch_size, unroll_steps, verbose=verbose,
                                                      start=each)["perplexity"] for each in starts})


def test(options, ckpt_file, data, batch_size=256, **kwargs):
    """Deprecated: `evaluate` (bilm-tf's name, which pytest collects as a test where it is imported)."""
    warnings.warn("bilm.training.test is deprecated; use bilm.training.evaluate (same arguments).",
                  DeprecationWarning, stacklevel=2)
    return evaluate(options, ckpt_file, data, batch_size, **kwargs)


# Not a test of pytest's, wherever it is imported.
test.__test__ = False
