"""A held-out evaluation, written once for TensorFlow's (`evaluation.py`) and JAX's and PyTorch's
(`bilm.training.arrays.evaluation`): where each sentence's LSTMs start, the rows a short text fills, and the
perplexities of a pass over the text (`evaluation_metrics`), from a backend's loss of a batch; needs neither.

`"carry"`: from the state the previous sentence of its row left, as in
training and bilm-tf; `"zeros"` or `"warm"` (the boundary state): from a
fixed state, as embedding starts each sentence. The fixed starts reset a
row's states where its input is its direction's opening token, so they
need windows of one step (`unroll_steps=1`).
"""
import collections
import math
import warnings

from bilm.errors import UserError
from bilm.utils.progress import Progress

EVALUATION_STARTS = ("carry", "zeros", "warm")
# The token that opens a sentence in each direction's stream (a `Vocabulary` attribute).
OPENING_TOKEN = {"forward": "bos", "backward": "eos"}


def check_evaluation_start(start, unroll_steps):
    """Raises `UserError` unless `start` is one of `EVALUATION_STARTS` that windows of `unroll_steps` allow."""
    if start not in EVALUATION_STARTS:
        raise UserError(f"start must be one of {EVALUATION_STARTS}. Received: start={start!r}")
    if start != "carry" and unroll_steps != 1:
        raise UserError(f"start={start!r} resets the states at each sentence start, which needs unroll_steps=1. "
                        f"Received: unroll_steps={unroll_steps}")


def checked_starts(start, unroll_steps):
    """`start`, one start or a list or tuple of starts, as a tuple of starts, each checked
    (`check_evaluation_start`) before any work."""
    starts = tuple(start) if isinstance(start, (list, tuple)) else (start,)
    for each in starts:
        check_evaluation_start(each, unroll_steps)
    return starts


def figures_as_asked(start, figures):
    """`figures` (`{start: figure}`) as `start` asked for them: the dict for a list or tuple of starts, the one
    figure for one start (see `checked_starts`)."""
    return figures if isinstance(start, (list, tuple)) else figures[start]


def rows_for_a_short_text(data, batch_size, unroll_steps):
    """For an evaluation that gave no complete batch: the rows to evaluate `data` (a test-mode `LMDataset` or
    `BidirectionalLMDataset`) with again, one per sentence, when it has fewer sentences than `batch_size` (with
    a warning; each row reads its own sentences, so a short text fills fewer rows); else `UserError`."""
    stream = getattr(data, "forward", data)
    n_sentences = sum(1 for _ in stream.iter_lines()) if hasattr(stream, "iter_lines") else 0
    if 1 <= n_sentences < batch_size:
        warnings.warn(f"The evaluation text has {n_sentences} sentences, fewer than the {batch_size} rows of a "
                      f"batch; it is evaluated with {n_sentences} rows.", stacklevel=3)
        return n_sentences
    raise UserError(f"The evaluation data gave no complete batch of {batch_size} rows x {unroll_steps} steps; "
                    "use a smaller batch_size or more data.")


def evaluation_metrics(batches, losses, directions, verbose=0, between_batches=None):
    """`{"perplexity", "<direction>_perplexity", "batches"}` of a pass over `batches`, or None where there was no
    batch (a text too short for the batch: `rows_for_a_short_text`).

    The loss of a batch is the mean of its directions' mean losses (`losses(batch) -> (loss, {direction: mean
    loss})`, the backend's, which carries the LSTM states); the perplexity is `exp` of the mean over batches (as
    bilm-tf's `test`). `verbose` 1 shows a progress line; `between_batches` (no argument) is called after each
    batch (e.g. to stop on a signal between the backend's calls).
    """
    totals = collections.defaultdict(float)
    n_batches = 0
    progress = Progress(None, unit="batch", verbose=verbose)
    for batch in batches:
        loss, per_direction = losses(batch)
        n_batches += 1
        totals["loss"] += float(loss)
        for direction, value in per_direction.items():
            totals[direction] += float(value)
        progress.update(n_batches, [("perplexity", math.exp(totals["loss"] / n_batches))])
        if between_batches is not None:
            between_batches()
    progress.close()
    if n_batches == 0:
        return None
    metrics = {"perplexity": math.exp(totals["loss"] / n_batches), "batches": n_batches}
    metrics.update({f"{direction}_perplexity": math.exp(totals[direction] / n_batches) for direction in directions})
    return metrics
