"""Where each sentence's LSTMs start in a held-out evaluation, the policy of TensorFlow's (`evaluation.py`) and
JAX's (`bilm.training.jax.evaluation`) evaluations; needs neither.

`"carry"`: from the state the previous sentence of its row left, as in
training and bilm-tf; `"zeros"` or `"warm"` (the boundary state): from a
fixed state, as embedding starts each sentence. The fixed starts reset a
row's states where its input is its direction's opening token, so they
need windows of one step (`unroll_steps=1`).
"""
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
