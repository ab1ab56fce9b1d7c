"""train: when it saves beyond the step interval: every M minutes, and on SIGINT or SIGTERM (save_on_signals).

Signals are sent by the process to itself as a step ends (`training_helpers.after_each_step`, on any
backend's step), so they arrive at a known step.
"""
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import bilm.training.arrays.training_run as array_training_run
import bilm.training.run.loop as loop_module
import warm_python
from bilm.training.run import run_checkpoint
from bilm.training.run.driver import run_steps
from bilm.training.run.loop import TrainingInterrupted, train
from bilm.training.run.run_schedule import SaveTimer
from helpers import ROOT, TESTS
from training_helpers import (
    after_each_step,
    checkpoint_arrays,
    checkpoint_numbers,
    open_data,
    tiny_options,
    write_corpus,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=400, n_heldout=20)


@pytest.fixture
def previous_handlers():
    """A handler of the test's own for SIGINT and SIGTERM (`handler`, recording what reaches it in `reached`)."""
    reached = []

    def handler(signum, frame):
        reached.append(signum)

    original = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield types.SimpleNamespace(handler=handler, reached=reached)
    for signum, previous in original.items():
        signal.signal(signum, previous)


def _signal_after_steps(monkeypatch, plan, seen_handlers=None):
    """Makes train's steps send `plan[n]` (a signal) to this process at the end of step n (1-based in the call).

    `seen_handlers` gets the SIGTERM handler in place during each step.
    """
    def after_step(taken):
        if seen_handlers is not None:
            seen_handlers.append(signal.getsignal(signal.SIGTERM))
        if taken in plan:
            os.kill(os.getpid(), plan[taken])

    after_each_step(monkeypatch, after_step)


@pytest.mark.slow
def test_sigterm_saves_the_step_reached_and_the_restart_continues_exactly(
        tmp_path, corpus, monkeypatch, previous_handlers):
    options = tiny_options(dropout=0.1)  # dropout masks and negative samples: both must continue exactly
    straight = train(options, open_data(options, corpus), 1, tmp_path / "straight", None, max_steps=8,
                     checkpoint_every_minutes=None, verbose=0)

    # The signal arrives during step 3, after that step's flags were sent:
    # step 4 tells every worker, then the loop stops and saves.
    _signal_after_steps(monkeypatch, {3: signal.SIGTERM})
    save_dir = tmp_path / "interrupted"
    with pytest.raises(TrainingInterrupted) as stopped:
        train(options, open_data(options, corpus), 1, save_dir, None, max_steps=8, checkpoint_every=1000,
              checkpoint_every_minutes=None, save_on_signals=True, verbose=0)
    interrupted = stopped.value
    assert (interrupted.signal, interrupted.step, interrupted.exit_status) == (signal.SIGTERM, 4, 143)
    assert interrupted.checkpoint == str(save_dir / "checkpoint.npz")
    assert checkpoint_numbers(save_dir) == [4]
    assert str(interrupted) == (f"Stopped by SIGTERM after step 4: saved {save_dir / 'checkpoint.npz'}. Continue "
                                f"with: train(..., restart_ckpt_file='{save_dir / 'checkpoint.npz'}') on the same data")
    assert signal.getsignal(signal.SIGTERM) is previous_handlers.handler
    assert previous_handlers.reached == []

    monkeypatch.setattr(loop_module, "run_steps", run_steps)
    resumed = train(options, open_data(options, corpus), 1, save_dir, None, restart_ckpt_file=interrupted.checkpoint,
                    max_steps=4, verbose=0)
    assert resumed["step"] == straight["step"] == 8
    expected, got = checkpoint_arrays(straight["checkpoint"]), checkpoint_arrays(resumed["checkpoint"])
    assert sorted(expected) == sorted(got)
    assert any(key.startswith("optimizer/") for key in got) and any(key.startswith("lstm_states/") for key in got)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.slow
def test_a_second_sigint_during_the_save_waits_for_it(tmp_path, corpus, monkeypatch, previous_handlers):
    _signal_after_steps(monkeypatch, {2: signal.SIGINT})
    save = run_checkpoint.save_checkpoint

    def save_interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again, as the save starts
        return save(*args, **kwargs)

    monkeypatch.setattr(run_checkpoint, "save_checkpoint", save_interrupted)
    options = tiny_options()
    with pytest.raises(TrainingInterrupted) as stopped:
        train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=8, checkpoint_every=1000,
              checkpoint_every_minutes=None, save_on_signals=True, verbose=0)
    assert (stopped.value.signal, stopped.value.step, stopped.value.exit_status) == (signal.SIGINT, 3, 130)
    assert checkpoint_numbers(tmp_path) == [3] and stopped.value.checkpoint == str(tmp_path / "checkpoint.npz")
    arrays = checkpoint_arrays(stopped.value.checkpoint)
    assert int(arrays["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 3
    assert int(arrays["data/batches/.ATTRIBUTES/VARIABLE_VALUE"]) == 3
    assert previous_handlers.reached == []
    assert signal.getsignal(signal.SIGINT) is previous_handlers.handler


@pytest.mark.slow  # over 3 s on two busy cores
def test_a_signal_during_the_last_step_keeps_the_runs_end(tmp_path, corpus, monkeypatch, previous_handlers, capsys):
    _signal_after_steps(monkeypatch, {3: signal.SIGTERM})
    options = tiny_options()
    with pytest.raises(TrainingInterrupted) as stopped:
        train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=3, save_on_signals=True, verbose=1)
    assert stopped.value.step == 3 and checkpoint_numbers(tmp_path) == [3]
    # The end of a call's work, the boundary state, was measured and saved.
    assert "Boundary state: the mean LSTM state at" in capsys.readouterr().out
    assert run_checkpoint.read_file_meta(stopped.value.checkpoint)["n_boundary_starts"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("save_on_signals", [True, False])
def test_handlers_are_replaced_only_while_training_and_only_when_asked(
        tmp_path, corpus, monkeypatch, previous_handlers, save_on_signals):
    during = []
    _signal_after_steps(monkeypatch, {}, seen_handlers=during)
    options = tiny_options()
    result = train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=2,
                   save_on_signals=save_on_signals, verbose=0)
    assert result["step"] == 2 and len(during) == 2
    assert all((handler is previous_handlers.handler) != save_on_signals for handler in during)
    assert signal.getsignal(signal.SIGTERM) is previous_handlers.handler
    assert signal.getsignal(signal.SIGINT) is previous_handlers.handler


def test_save_on_signals_outside_the_main_thread_is_a_clear_error(tmp_path, corpus):
    options = tiny_options()
    errors = []

    def run():
        try:
            train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=1, save_on_signals=True,
                  verbose=0)
        except ValueError as error:
            errors.append(error)

    thread = threading.Thread(target=run, name="trainer")
    thread.start()
    thread.join()
    assert len(errors) == 1 and "save_on_signals=True needs the main thread" in str(errors[0])
    assert "'trainer'" in str(errors[0]) and not os.listdir(tmp_path)


def test_save_timer_is_due_every_interval_after_the_last_reset():
    now = [0.0]
    timer = SaveTimer(10, clock=lambda: now[0])
    now[0] = 599.0
    assert not timer.due()
    now[0] = 600.0
    assert timer.due()
    timer.reset()
    now[0] = 1199.0
    assert not timer.due()
    assert not SaveTimer(None, clock=lambda: 1e12).due()
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"checkpoint_every_minutes must be positive or None. Received: {bad}"):
            SaveTimer(bad)


@pytest.mark.slow
def test_checkpoints_on_time_with_a_clock_that_steps_advance(tmp_path, corpus, monkeypatch):
    # Each step takes 4 minutes of the fake clock and the interval is 10:
    # steps 4 and 8 start 12 minutes after the loop began or last saved.
    minutes = [0.0]

    after_each_step(monkeypatch, lambda taken: minutes.__setitem__(0, minutes[0] + 4))
    monkeypatch.setattr(loop_module, "SaveTimer", functools.partial(SaveTimer, clock=lambda: 60 * minutes[0]))
    options = tiny_options()
    train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=9, checkpoint_every=1000,
          checkpoint_every_minutes=10, max_to_keep=None, verbose=0)
    assert checkpoint_numbers(tmp_path) == [4, 8, 9]


WORKER = """
import json, os, signal, sys
config = json.loads(sys.argv[1])
sys.path.insert(0, config["tests"])
import types
import bilm.training.run.loop as loop
from helpers import ROOT, TESTS
from training_helpers import after_each_step, open_data


def after_step(taken):
    if taken == config["signal_after"]:
        os.kill(os.getpid(), signal.SIGTERM)


if config["signal_after"]:
    after_each_step(types.SimpleNamespace(setattr=setattr), after_step)  # for this process's life
try:
    result = loop.train(config["options"], open_data(config["options"], config["corpus"]), 1, config["save_dir"],
                        None, restart_ckpt_file=config["restart"], max_steps=config["max_steps"],
                        checkpoint_every=1000, save_on_signals=True, seed=1, verbose=0)
    print("OUTCOME " + json.dumps(["ended", result["step"], result["checkpoint"]]))
except loop.TrainingInterrupted as stopped:
    print("OUTCOME " + json.dumps([stopped.signal.name, stopped.step, stopped.by_peer, stopped.checkpoint]))
"""


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _run_workers(tmp_path, corpus, options, save_dir, signal_after, restart=None, max_steps=8):
    """Runs `train` in two worker processes of one cluster on 127.0.0.1, worker i sending itself SIGTERM after
    `signal_after[i]` steps (0: never); returns each worker's outcome: `[signal, step, by_peer, checkpoint]` when
    stopped, `["ended", step, checkpoint]` otherwise."""
    cluster = {"worker": [f"localhost:{_free_port()}" for _ in range(2)]}
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    workers = []
    for index, after in enumerate(signal_after):
        config = {"tests": TESTS, "corpus": corpus, "options": options, "save_dir": save_dir, "signal_after": after,
                  "restart": restart, "max_steps": max_steps}
        env = dict(os.environ,
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        workers.append(warm_python.Popen([sys.executable, str(script), json.dumps(config)], cwd=ROOT, env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outcomes = []
    for worker in workers:
        try:
            out, err = worker.communicate(timeout=300)
        finally:
            worker.kill()
        assert worker.returncode == 0, err[-3000:]
        outcomes += [json.loads(line[len("OUTCOME "):]) for line in out.splitlines() if line.startswith("OUTCOME ")]
    return outcomes


@pytest.mark.slow
def test_a_signal_to_one_worker_stops_every_worker_at_the_same_step_and_the_job_restarts_exactly(tmp_path, corpus):
    # Exact steps (no dropout, the full softmax) with Adam: two workers of batch 2 take the steps of one
    # device of batch 4, so the restarted job can be compared with one uninterrupted device.
    options = dict(tiny_options(batch_size=2, dropout=0.0, sample_softmax=False), optimizer="adam",
                   learning_rate=0.01)
    save_dir = str(tmp_path / "ckpt")
    # Only worker 1 (not the chief) receives SIGTERM, as a cluster preempting one machine does.
    outcomes = _run_workers(tmp_path, corpus, options, save_dir, signal_after=[0, 2])
    checkpoint = os.path.join(save_dir, "checkpoint.npz")
    assert outcomes == [["SIGTERM", 3, True, checkpoint], ["SIGTERM", 3, False, checkpoint]]
    assert checkpoint_numbers(save_dir) == [3] and sorted(os.listdir(save_dir)) == ["checkpoint.npz", "options.json"]

    # The job is started again, every worker from the saved step (what restart.py does), to the same 8 steps.
    outcomes = _run_workers(tmp_path, corpus, options, save_dir, signal_after=[0, 0], restart=checkpoint,
                            max_steps=5)
    final = os.path.join(save_dir, "checkpoint.npz")
    assert outcomes == [["ended", 8, final], ["ended", 8, final]]
    one_device = dict(options, batch_size=4)
    straight = train(one_device, open_data(one_device, corpus), 1, tmp_path / "one_device", None, max_steps=8,
                     seed=1, verbose=0)
    expected, got = checkpoint_arrays(straight["checkpoint"]), checkpoint_arrays(final)
    keys = [key for key in expected if key.startswith(("model/", "softmax/", "optimizer/", "lstm_states/"))]
    assert "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE" in keys and any("lstm_states/" in key for key in keys)
    assert sorted(keys) == sorted(key for key in got if key.startswith(("model/", "softmax/", "optimizer/",
                                                                        "lstm_states/")))
    for key in keys:  # two workers' halves against one device's whole batch: round-off of two programs
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-4, atol=1e-5, err_msg=key)


def _phase_that_waits_for_a_signal(signum):
    """A stand-in for a long phase between steps: it sends `signum` to this process, then would work for a minute."""
    def phase(*args, **kwargs):
        os.kill(os.getpid(), signum)
        for _ in range(600):
            time.sleep(0.1)
        raise AssertionError("the signal did not stop the phase")
    return phase


@pytest.mark.slow
def test_a_signal_during_the_boundary_state_measure_stops_it_and_saves_the_steps(
        tmp_path, corpus, monkeypatch, previous_handlers):
    phase = _phase_that_waits_for_a_signal(signal.SIGTERM)
    monkeypatch.setattr(array_training_run, "measure_boundary_state", phase)
    options = tiny_options()
    started = time.monotonic()
    with pytest.raises(TrainingInterrupted) as stopped:
        train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=3, save_on_signals=True, verbose=0)
    assert time.monotonic() - started < 50
    assert (stopped.value.signal, stopped.value.step, stopped.value.exit_status) == (signal.SIGTERM, 3, 143)
    assert stopped.value.checkpoint == str(tmp_path / "checkpoint.npz") and checkpoint_numbers(tmp_path) == [3]
    assert previous_handlers.reached == [] and signal.getsignal(signal.SIGTERM) is previous_handlers.handler


@pytest.mark.slow
def test_a_signal_during_held_out_evaluation_stops_it_and_saves_the_steps(tmp_path, corpus, monkeypatch,
                                                                          previous_handlers):
    monkeypatch.setattr(array_training_run.ArrayTrainingRun, "heldout", _phase_that_waits_for_a_signal(signal.SIGINT))
    options = tiny_options()
    with pytest.raises(TrainingInterrupted) as stopped:
        train(options, open_data(options, corpus), 1, tmp_path, None, heldout_data=open_data(options, corpus),
              heldout_every=2, max_steps=6, checkpoint_every=1000, save_on_signals=True, verbose=0)
    assert (stopped.value.signal, stopped.value.step) == (signal.SIGINT, 2)
    assert checkpoint_numbers(tmp_path) == [2]
    assert previous_handlers.reached == []


@pytest.mark.slow
def test_max_steps_ends_the_run_and_a_restart_continues_to_it(tmp_path, corpus, capsys, monkeypatch):
    # Each run's model: drawn at random for a new run, built without draws for a restart (the checkpoint sets
    # every weight).
    from bilm.models.functional_bilm import WEIGHTS_FOLLOW
    from bilm.training.arrays import train_step
    from tensorflow_reference import training_lm

    builds = []
    for module in (training_lm, train_step):  # whichever step the backend's run takes
        monkeypatch.setattr(module, "build_bilm", lambda *args, build_bilm=module.build_bilm, **kwargs:
                            builds.append(WEIGHTS_FOLLOW.is_on()) or build_bilm(*args, **kwargs))
    options = tiny_options(max_steps=5, n_epochs=3)
    first = train(options, open_data(options, corpus), 1, tmp_path, None, max_steps=2, verbose=1)
    assert first["step"] == 2 and not first["finished"]
    assert "batches per epoch, 3 epoch(s): 300 batches, at most 5 steps in all (max_steps)." in capsys.readouterr().out
    second = train(options, open_data(options, corpus), 1, tmp_path, None, restart_ckpt_file=first["checkpoint"],
                   verbose=0)
    assert second["step"] == 5 and second["steps_taken"] == 3 and second["finished"]
    third = train(options, open_data(options, corpus), 1, tmp_path, None, restart_ckpt_file=second["checkpoint"],
                  verbose=0)
    assert third["steps_taken"] == 0 and third["finished"]
    assert builds[0] is False and builds.count(False) == 1 and len(builds) >= 3, builds
