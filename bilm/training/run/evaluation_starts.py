"""Where each sentence's LSTMs start in a held-out evaluation, and the rows a short text fills: the
policy of TensorFlow's (`evaluation.py`) and
JAX's (`bilm.training.jax.evaluation`) evaluations; needs neither.

`"carry"`: from the state the previous sentence of its row left, as in
training and bilm-tf; `"zeros"` or `"warm"` (the boundary state): from a
fixed state, as embedding starts each sentence. The fixed starts reset a
row's states where its input is its direction's opening token, so they
need windows of one step (`unroll_steps=1`).
"""
import warnings

from bilm.errors import UserError

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
