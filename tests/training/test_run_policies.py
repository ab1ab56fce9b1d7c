"""The policies around a training run's steps, each alone: when to save, when to stop, when to evaluate,
what the progress line says."""
import signal
import types

from bilm.training.run.checkpoint_policy import CheckpointPolicy
from bilm.training.run.heldout_policy import HeldoutEvaluation
from bilm.training.run.progress_report import ProgressReport
from bilm.training.run.run_schedule import SaveTimer, Schedule
from bilm.training.run.stop_policy import StopPolicy
from bilm.training.run.stop_signals import PhaseInterrupted, StopSignals


def test_checkpoints_every_n_steps_at_epoch_ends_and_when_any_worker_says_time_is_up():
    now = [0.0]
    policy = CheckpointPolicy(5, SaveTimer(1, clock=lambda: now[0]))
    assert policy.requests() == [0.0]
    now[0] = 60.0
    assert policy.requests() == [1.0]  # this worker's own clock
    saves = [step for step in range(1, 13) if policy.should_save(step, end_of_epoch=False, agreed=[False])]
    assert saves == [5, 10]
    assert policy.should_save(3, end_of_epoch=True, agreed=[False])
    assert policy.should_save(3, end_of_epoch=False, agreed=[True])  # another worker's time was up


def test_a_stop_is_the_calls_end_or_a_signal_agreed_by_the_workers():
    signals = StopSignals(enabled=False)
    stop = StopPolicy(signals, stop_at=10)
    assert stop.requests() == [0.0, 0.0] and not stop.reached_end(9) and stop.reached_end(10)
    stop.agree([False, False])
    assert stop.requested is None and not stop.stops_early(3) and stop.signal_at_end() is None
    stop.agree([False, True])  # another worker's SIGTERM
    assert stop.requested == (signal.SIGTERM, True) and stop.stops_early(3)
    assert not stop.stops_early(10)  # the last step: the end of the call runs, then the stop
    signals.received = signal.SIGINT
    assert signals.flags() == [1.0, 0.0]
    stop.agree([True, True])
    assert stop.requested == (signal.SIGINT, False)  # this worker's own signal first


def test_a_signal_received_after_the_last_agreement_stops_at_the_end():
    signals = StopSignals(enabled=False)
    stop = StopPolicy(signals, stop_at=4)
    stop.agree([False, False])
    signals.received = signal.SIGTERM
    assert stop.signal_at_end() == (signal.SIGTERM, False)


class _FakeRun:
    def __init__(self):
        self.messages, self.scalar_calls, self.progress = [], [], None
        self.current_step, self.consumed, self.verbose = 0, 0, 0

    def report(self, message):
        self.messages.append(message)

    def scalars(self, values):
        self.scalar_calls.append((self.current_step, values))

    def heldout(self, data, batch_size, tag):
        if data == "interrupt":
            raise PhaseInterrupted(signal.SIGINT)
        return None if data is None else 12.5


def test_heldout_evaluation_when_due_and_a_signal_during_it():
    run = _FakeRun()
    heldout = HeldoutEvaluation("data", every_steps=4, batch_size=2)
    assert [step for step in range(1, 10) if heldout.due(step, end_of_epoch=False)] == [4, 8]
    assert heldout.due(3, end_of_epoch=True) and not HeldoutEvaluation(None, None, 2).due(3, False)
    assert heldout.evaluate(run, "Step 4", StopSignals(enabled=False)) is None and heldout.perplexity == 12.5
    interrupted = HeldoutEvaluation("interrupt", None, 2)
    assert interrupted.evaluate(run, "Epoch 1", StopSignals(enabled=False)) == signal.SIGINT
    assert interrupted.perplexity is None and "SIGINT: held-out evaluation stopped." in run.messages


def test_the_progress_report_averages_the_recent_losses_and_writes_scalars_every_n_steps():
    settings = types.SimpleNamespace(sample_softmax=True, n_negative_samples_batch=64, dropout=0.1,
                                     learning_rate=0.2)
    report = ProgressReport(settings, Schedule(2, 40, 10, 20), summary_every=2)
    run = _FakeRun()
    report.describe(run)
    assert "sampled-softmax perplexity" in run.messages[0] and "64 sampled negatives, dropout on" in run.messages[0]
    for step, loss in enumerate([1.0, 2.0, 3.0], start=1):
        run.current_step = run.consumed = step
        report.step_started()
        report.step_ended(run, loss, norm=0.5)
    assert report.steps == 3 and report.mean_loss == 2.0
    assert [step for step, _ in run.scalar_calls] == [2]
    assert run.scalar_calls[0][1]["learning_rate"] == 0.2 and run.scalar_calls[0][1]["gradient_norm"] == 0.5
