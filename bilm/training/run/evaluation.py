"""Held-out perplexity of a checkpoint with the full softmax (`evaluate`, bilm-tf's `test`), on every backend:
the checkpoint's weights (not its optimizer's state) read into the backend's training step
(`bilm.backend.trainer_module`'s `evaluate_checkpoint`, `bilm.training.arrays.evaluation`).

`evaluate` is bilm-tf's `test` under a name pytest does not collect;
`test` stays as its deprecated alias.
"""
import warnings

from bilm.backend import trainer_module
from bilm.options import load_options
from bilm.training.run import run_directory
from bilm.training.run.evaluation_starts import EVALUATION_STARTS, checked_starts  # noqa: F401 (bilm.training's)


def evaluate(options, ckpt_file, data, batch_size=256, *, unroll_steps=1, verbose=1, start="carry"):
    """Held-out perplexity of a checkpoint (full softmax), as bilm-tf's `test`.

    Args:
        options: the training options (dict or file).
        ckpt_file: a checkpoint: its file (as `load_options_latest_checkpoint`
            returns it), an earlier run's TensorFlow prefix, or a run's
            `save_dir` (its newest checkpoint); written by any backend.
        data: an `LMDataset` or `BidirectionalLMDataset` in test mode (it
            must end).
        batch_size: rows per batch; `unroll_steps`: window length (1 as bilm-tf).
        start: where each sentence's LSTM states start
            (`bilm.training.run.evaluation_starts.EVALUATION_STARTS`); or a
            list or tuple of starts, each evaluated in its own pass over
            `data`, the checkpoint loaded once. A checkpoint whose boundary
            state is not measured yet (one converted from TF1 by
            `convert_tf1_checkpoint`) gets one measured on `data` for
            `"warm"`.

    Returns:
        float, the average perplexity; for a list or tuple of starts,
        `{start: average perplexity}`, each the figure that start gives alone.

    Raises:
        CheckpointError: `ckpt_file` is no checkpoint, or holds another
            model's state.
    """
    checked_starts(start, unroll_steps)  # every start, before any work
    meta = run_directory.checkpoint_meta(ckpt_file)
    return trainer_module().evaluate_checkpoint(meta, load_options(options), data, batch_size, verbose, start,
                                                unroll_steps)


def test(options, ckpt_file, data, batch_size=256, **kwargs):
    """Deprecated: `evaluate` (bilm-tf's name, which pytest collects as a test where it is imported)."""
    warnings.warn("bilm.training.test is deprecated; use bilm.training.evaluate (same arguments).",
                  DeprecationWarning, stacklevel=2)
    return evaluate(options, ckpt_file, data, batch_size, **kwargs)


# Not a test of pytest's, wherever it is imported.
test.__test__ = False
