"""Held-out perplexity with the full softmax (bilm-tf's `test`)."""
import collections
import math

from bilm.training import checkpoints
from bilm.training.objective import TrainingLM
from bilm.training.settings import training_settings
from bilm.training.tf_dataset import make_tf_dataset
from bilm.utils.progress import Progress


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
