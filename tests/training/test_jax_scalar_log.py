"""bilm.training.jax.scalar_log: TensorFlow's scalars, read one step late, and an error that is never hidden."""
import math

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bilm.training.jax.scalar_log import ScalarLog


class FailedOnDevice:
    """A metric whose device failed: reading it raises."""

    def __float__(self):
        raise RuntimeError("the device failed")


def _scalars(log_dir):
    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(s.step, s.value) for s in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_scalars_every_summary_steps_from_the_last_twenty_losses(tmp_path):
    log = ScalarLog(tmp_path, summary_every=2, learning_rate=0.2)
    for step in range(1, 5):
        log.after_step(step, {"loss": float(step), "norm": 10.0 * step})
    assert _scalars(tmp_path)["gradient_norm"] == [(2, 20.0)]  # step 4 still pending
    log.heldout(4, 55.0)
    log.close()
    scalars = _scalars(tmp_path)
    assert scalars["gradient_norm"] == [(2, 20.0), (4, 40.0)]
    assert [(s, pytest.approx(v, rel=1e-6)) for s, v in scalars["train_perplexity"]] == [
        (2, math.exp(1.5)), (4, math.exp(2.5))]
    assert scalars["learning_rate"] == [(2, pytest.approx(0.2)), (4, pytest.approx(0.2))]
    assert scalars["heldout_perplexity"] == [(4, 55.0)]


def test_no_log_dir_writes_and_reads_nothing():
    log = ScalarLog(None, summary_every=1, learning_rate=0.1)
    log.after_step(1, {"loss": FailedOnDevice(), "norm": FailedOnDevice()})
    log.after_step(2, {"loss": FailedOnDevice(), "norm": FailedOnDevice()})
    log.close()


def test_closing_after_an_error_drops_figures_it_cannot_read_and_closes_the_file(tmp_path):
    log = ScalarLog(tmp_path, summary_every=1, learning_rate=0.1)
    log.after_step(1, {"loss": 2.0, "norm": 1.0})
    log.after_step(2, {"loss": FailedOnDevice(), "norm": FailedOnDevice()})  # writes step 1
    log.close(after_error=True)  # the run's own error propagates, not this one
    assert log.writer._file.closed
    assert _scalars(tmp_path)["gradient_norm"] == [(1, 1.0)]
    # Without an error to keep, a figure that cannot be read is an error of its own.
    log = ScalarLog(tmp_path / "again", summary_every=1, learning_rate=0.1)
    log.after_step(1, {"loss": FailedOnDevice(), "norm": FailedOnDevice()})
    with pytest.raises(RuntimeError, match="the device failed"):
        log.close()
