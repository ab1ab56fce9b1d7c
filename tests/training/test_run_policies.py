"""The policies around a training run's steps, each alone: when to save, when to stop, when to evaluate,
what the progress line says; and how their flags are agreed by name."""
import signal
import types

import pytest

from bilm.training.run.policies import (
    CONTINUE,
    SAVE,
    CheckpointPolicy,
    HeldoutEvaluation,
    Policy,
    ProgressReport,
    StepResult,
    StopOnSignals,
    interrupt,
)
from bilm.training.run.policies.flag_agreement import FlagAgreement
from bilm.training.run.run_schedule import SaveTimer, Schedule
from bilm.training.run.run_summary import describe_progress_line
from bilm.training.run.stop_signals import PhaseInterrupted, StopSignals


def _step(step, end_of_epoch=False, last=False, loss=1.0, agreed=None, **kwargs):
    return StepResult(step, loss, kwargs.pop("norm", 0.5), kwargs.pop("seconds", 0.1), end_of_epoch,
                      kwargs.pop("epoch", 0), last, agreed or {})


def test_checkpoints_every_n_steps_at_epoch_ends_and_when_any_worker_says_time_is_up():
    now = [0.0]
    policy = CheckpointPolicy(5, SaveTimer(1, clock=lambda: now[0]))
    assert policy.requests() == {"time_is_up": False}
    now[0] = 60.0
    assert policy.requests() == {"time_is_up": True}  # this worker's own clock
    calm = {"time_is_up": False}
    saves = [step for step in range(1, 13) if policy.after_step(None, _step(step, agreed=calm)) == SAVE]
    assert saves == [5, 10]
    assert policy.after_step(None, _step(3, end_of_epoch=True, agreed=calm)) == SAVE
    assert policy.after_step(None, _step(3, agreed={"time_is_up": True})) == SAVE  # another worker's time was up
    policy.on_run_start(None)
    assert policy.requests() == {"time_is_up": False}  # the call's first step resets the clock


def _signals_agreed(sigint=False, sigterm=False):
    return {"SIGINT": sigint, "SIGTERM": sigterm}


def test_a_stop_is_a_signal_agreed_by_the_workers():
    signals = StopSignals(enabled=False)
    stop = StopOnSignals(signals)
    assert stop.requests() == {"SIGINT": False, "SIGTERM": False}
    assert stop.after_step(None, _step(3, agreed=_signals_agreed())) == CONTINUE
    assert stop.on_run_end(None) == CONTINUE
    # another worker's SIGTERM
    assert stop.after_step(None, _step(3, agreed=_signals_agreed(sigterm=True))) == interrupt(signal.SIGTERM, True)
    signals.received = signal.SIGINT
    assert stop.requests() == {"SIGINT": True, "SIGTERM": False}
    # this worker's own signal first
    assert (stop.after_step(None, _step(3, agreed=_signals_agreed(True, True)))
            == interrupt(signal.SIGINT, False))


def test_a_signal_received_after_the_last_agreement_stops_at_the_end():
    signals = StopSignals(enabled=False)
    stop = StopOnSignals(signals)
    assert stop.after_step(None, _step(4, last=True, agreed=_signals_agreed())) == CONTINUE
    signals.received = signal.SIGTERM
    assert stop.on_run_end(None).interrupted_by == (signal.SIGTERM, False)


class _FakeRun:
    def __init__(self):
        self.messages, self.scalar_calls, self.progress = [], [], None
        self.current_step, self.consumed, self.verbose = 0, 0, 0

    def report(self, message):
        self.messages.append(message)

    def scalars(self, values):
        self.scalar_calls.append((self.current_step, values))

    def open_progress(self, total):
        self.total = total

    def heldout(self, data, batch_size, tag):
        if data == "interrupt":
            raise PhaseInterrupted(signal.SIGINT)
        self.messages.append(tag)
        return None if data is None else 12.5


def test_heldout_evaluation_when_due_and_a_signal_during_it():
    run = _FakeRun()
    signals = StopSignals(enabled=False)
    heldout = HeldoutEvaluation("data", every_steps=4, batch_size=2, stop_signals=signals)
    assert [step for step in range(1, 10) if heldout.due(step, end_of_epoch=False)] == [4, 8]
    assert heldout.due(3, end_of_epoch=True) and not HeldoutEvaluation(None, None, 2, signals).due(3, False)
    assert heldout.after_step(run, _step(4)) == CONTINUE and heldout.perplexity == 12.5
    assert heldout.result() == {"heldout_perplexity": 12.5}
    heldout.after_step(run, _step(6, end_of_epoch=True, epoch=2))
    assert run.messages[-2:] == ["Step 4", "Epoch 2"]
    interrupted = HeldoutEvaluation("interrupt", None, 2, signals)
    assert interrupted.after_step(run, _step(3, end_of_epoch=True)) == interrupt(signal.SIGINT)
    assert interrupted.perplexity is None and interrupted.result() == {}
    assert "SIGINT: held-out evaluation stopped." in run.messages


def test_the_progress_report_averages_the_recent_losses_and_writes_scalars_every_n_steps():
    settings = types.SimpleNamespace(sample_softmax=True, n_negative_samples_batch=64, dropout=0.1,
                                     learning_rate=0.2)
    report = ProgressReport(settings, Schedule(2, 40, 10, 20), summary_every=2)
    run = _FakeRun()
    describe_progress_line(run.report, settings)
    assert "sampled-softmax perplexity" in run.messages[0] and "64 sampled negatives, dropout on" in run.messages[0]
    report.on_run_start(run)
    assert run.total == 20 and "traces and compiles" in run.messages[1]
    for step, loss in enumerate([1.0, 2.0, 3.0], start=1):
        run.current_step = run.consumed = step
        assert report.after_step(run, _step(step, loss=loss)) == CONTINUE
    assert report.steps == 3 and report.mean_loss == 2.0 and report.result() == {"loss": 2.0}
    assert [step for step, _ in run.scalar_calls] == [2]
    assert run.scalar_calls[0][1]["learning_rate"] == 0.2 and run.scalar_calls[0][1]["gradient_norm"] == 0.5


class _Flags(Policy):
    def __init__(self, name, flags, raised):
        self.name, self.flags, self.raised = name, flags, raised

    def requests(self):
        return self.raised


def test_flags_are_agreed_by_policy_and_flag_name_not_by_position():
    first = _Flags("first", ("b", "a"), {"a": True, "b": False})
    second = _Flags("second", ("a",), {"a": False})
    agreement = FlagAgreement([first, second, _Flags("none", (), {})])
    assert agreement.requests() == [0.0, 1.0, 0.0]
    # Means over the replicas: positive where any worker raised the flag.
    assert agreement.agreed([0.0, 0.5, 0.25]) == {"first": {"b": False, "a": True}, "second": {"a": True},
                                                  "none": {}}
    assert agreement.agreed(None) == {"first": {}, "second": {}, "none": {}}
    with pytest.raises(ValueError, match="declares the flags \\['a'\\] but requested \\['c'\\]"):
        FlagAgreement([_Flags("odd", ("a",), {"c": True})]).requests()
    with pytest.raises(ValueError, match="unique names"):
        FlagAgreement([first, _Flags("first", (), {})])
