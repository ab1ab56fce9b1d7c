"""train: when it saves beyond the step interval: every M minutes."""
import functools
import os

import pytest

import bilm.training.loop as loop_module
from bilm.training.loop import _SaveTimer, train
from bilm.training.train_step import TrainStep
from training_helpers import open_data, tiny_options, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=400, n_heldout=20)


def _checkpoint_numbers(save_dir):
    return sorted(int(name.split("-")[1].split(".")[0]) for name in os.listdir(save_dir)
                  if name.startswith("model.ckpt-") and name.endswith(".index"))


def test_save_timer_is_due_every_interval_after_the_last_reset():
    now = [0.0]
    timer = _SaveTimer(10, clock=lambda: now[0])
    now[0] = 599.0
    assert not timer.due()
    now[0] = 600.0
    assert timer.due()
    timer.reset()
    now[0] = 1199.0
    assert not timer.due()
    assert not _SaveTimer(None, clock=lambda: 1e12).due()
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"checkpoint_every_minutes must be positive or None. Received: {bad}"):
            _SaveTimer(bad)


def test_checkpoints_on_time_with_a_clock_that_steps_advance(tmp_path, corpus, monkeypatch):
    # Each step takes 4 minutes of the fake clock and the interval is 10:
    # steps 4 and 8 start 12 minutes after the loop began or last saved.
    minutes = [0.0]

    class FourMinuteStep(TrainStep):
        def __call__(self, *args, **kwargs):
            minutes[0] += 4
            return super().__call__(*args, **kwargs)

    monkeypatch.setattr(loop_module, "TrainStep", FourMinuteStep)
    monkeypatch.setattr(loop_module, "_SaveTimer", functools.partial(_SaveTimer, clock=lambda: 60 * minutes[0]))
    options = tiny_options()
    train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=9, checkpoint_every=1000,
          checkpoint_every_minutes=10, max_to_keep=None, verbose=0)
    assert _checkpoint_numbers(tmp_path) == [4, 8, 9]

