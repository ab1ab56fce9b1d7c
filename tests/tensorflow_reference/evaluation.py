"""TensorFlow's own held-out evaluation of a `TrainingLM`, the reference the array evaluation
(`bilm.training.arrays.evaluation`, which `bilm.training.evaluate` runs on every backend) is tested against:
`TrainingLM.evaluation_step` over a `tf.data` pipeline of the batches. bilm evaluated with it until `evaluate`
moved to the array state."""
import tensorflow as tf

from bilm.errors import UserError
from bilm.training.run.evaluation_starts import (
    OPENING_TOKEN,
    check_evaluation_start,
    evaluation_metrics,
    rows_for_a_short_text,
)
from tensorflow_reference.tf_dataset import make_tf_dataset


def evaluate_lm(lm, data, batch_size, unroll_steps=1, verbose=0, start="carry"):
    """Full-softmax perplexity of `lm` on a stream that ends (test mode), as `evaluate_state` computes it.

    LSTM states start at zero and carry between batches. The loss of a
    batch is the mean of its directions' mean losses; the perplexity is
    `exp` of the mean over batches (as bilm-tf's `test`). `start`: where
    each sentence starts (`"carry"`, `"zeros"` or `"warm"`,
    `lm.boundary_state`). A text with fewer sentences than `batch_size` is
    evaluated with one row per sentence.

    Returns:
        `{"perplexity", "<direction>_perplexity", "batches"}`.
    """
    check_evaluation_start(start, unroll_steps)
    if start == "warm" and int(lm.n_boundary_starts.numpy()) == 0:
        raise UserError("start='warm' needs the model's boundary state, and it has none yet.")
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
