"""bin/train_elmo.py stopped by SIGTERM or SIGINT: exit status, its one line, and a restart that continues exactly.

The script runs in a subprocess whose steps print `STEP n` as they end and,
from step SLOW_FROM on, last 0.2 s longer, so that the test can send the
signal after a known step and the run cannot end before it arrives.
"""
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import warm_python
from bilm.commands.training_arguments import script_command
from bilm.training.data.shards import count_tokens
from helpers import ROOT
from training_helpers import checkpoint_arrays, checkpoint_numbers, tiny_options, write_corpus

RUNNER = """
import runpy, sys, time
import bilm.training.run.loop as loop

slow_from = int(sys.argv[1])
run_steps = loop.run_steps


def reporting_run_steps(run, step_fn, *args, **kwargs):
    # Each step of the call, whichever the backend's run takes, says it has ended.
    taken = [0]

    def step(*step_args):
        outputs = step_fn(*step_args)
        taken[0] += 1
        print(f"STEP {taken[0]}", flush=True)
        if taken[0] >= slow_from:
            time.sleep(0.2)
        return outputs

    return run_steps(run, step, *args, **kwargs)


loop.run_steps = reporting_run_steps
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _script(name):
    spec = importlib.util.spec_from_file_location(f"bin_{name}", os.path.join(ROOT, "bin", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    """The corpus, an options file without n_train_tokens, and the steps of one epoch at batch 8."""
    tmp_path = tmp_path_factory.mktemp("signals")
    corpus = write_corpus(tmp_path, n_train=400, n_heldout=40)
    options = tiny_options(dropout=0.1)
    del options["n_train_tokens"]
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps(options))
    return {**corpus, "options": str(options_file), "steps_per_epoch": count_tokens(corpus["train"]) // (8 * 5)}


def _flags(run_files, save_dir):
    return ["--train_prefix", run_files["train"], "--vocab_file", run_files["vocab"], "--save_dir", str(save_dir),
            "--batch_size", "8", "--heldout_prefix", run_files["heldout"], "--checkpoint_every", "100000"]


def _train_and_signal(tmp_path, argv, after_step, signals):
    """Runs bin/train_elmo.py with `argv`, sends `signals` once step `after_step` has ended; `(status, stderr)`."""
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    env = dict(os.environ)
    process = warm_python.Popen([sys.executable, str(runner), str(after_step), "bin/train_elmo.py", *argv], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stdout:
            if line.strip() == f"STEP {after_step}":
                for signum in signals:
                    process.send_signal(signum)
                break
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    return process.returncode, err



@pytest.mark.slow
def test_sigterm_exits_143_and_the_restart_it_names_ends_like_a_straight_run(tmp_path, run_files):
    save_dir = tmp_path / "interrupted"
    first = _flags(run_files, save_dir) + ["--options_file", run_files["options"], "--n_epochs", "1",
                                          "--checkpoint_every_minutes", "60"]
    status, err = _train_and_signal(tmp_path, first, 20, [signal.SIGTERM])
    assert status == 143, err[-3000:]
    last_line = err.strip().splitlines()[-1]
    saved = re.fullmatch(r"Stopped by SIGTERM after step (\d+): saved (\S+)\. Continue with: (.*)", last_line)
    assert saved, last_line
    step = int(saved.group(1))
    # Step 20 ended before the signal was sent; the step after it carries it to the loop.
    assert 20 < step < run_files["steps_per_epoch"] - 10
    assert saved.group(2) == str(save_dir / "checkpoint.npz") and checkpoint_numbers(save_dir) == [step]
    command = shlex.split(saved.group(3))
    script = script_command("restart.py")  # runs from any directory
    assert command[:len(script)] == script and (script == ["restart.py"] or os.path.isabs(script[-1]))
    command = command[len(script):]
    flags = _flags(run_files, save_dir) + ["--n_epochs", "1", "--checkpoint_every_minutes", "60.0"]
    assert sorted(zip(command[::2], command[1::2])) == sorted(zip(flags[::2], flags[1::2]))

    resumed = _script("restart").main(command)
    straight = _script("train_elmo").main(_flags(run_files, tmp_path / "straight") + [
        "--options_file", run_files["options"], "--n_epochs", "1"])
    assert resumed["step"] == straight["step"] == run_files["steps_per_epoch"]
    assert resumed["heldout_perplexity"] == pytest.approx(straight["heldout_perplexity"], rel=1e-5)
    expected, got = checkpoint_arrays(straight["checkpoint"]), checkpoint_arrays(resumed["checkpoint"])
    assert sorted(expected) == sorted(got)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.slow
def test_ctrl_c_twice_exits_130_with_the_step_saved(tmp_path, run_files):
    save_dir = tmp_path / "ckpt"
    status, err = _train_and_signal(tmp_path, _flags(run_files, save_dir) + ["--options_file", run_files["options"]],
                                    5, [signal.SIGINT, signal.SIGINT])
    assert status == 130, err[-3000:]
    saved = re.fullmatch(r"Stopped by SIGINT after step (\d+): saved (\S+)\. Continue with: .*restart.py --.*",
                         err.strip().splitlines()[-1])
    assert saved and int(saved.group(1)) > 5 and checkpoint_numbers(save_dir) == [int(saved.group(1))]
    arrays = checkpoint_arrays(saved.group(2))
    assert int(arrays["data/batches/.ATTRIBUTES/VARIABLE_VALUE"]) == int(saved.group(1))


FIT_RUNNER = """
import runpy, sys, time
import bilm.training.arrays.training_run as training_run

fit = training_run.initialize_softmax_of_state


def slow_fit(*args, **kwargs):
    print("FIT", flush=True)
    for _ in range(600):  # a minute of work before the fit itself
        time.sleep(0.1)
    return fit(*args, **kwargs)


training_run.initialize_softmax_of_state = slow_fit
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_ctrl_c_while_fitting_the_softmax_stops_at_once_and_leaves_save_dir_as_it_was(tmp_path, run_files):
    signum = signal.SIGINT
    from helpers import write_model

    (tmp_path / "model").mkdir()
    write_model(tmp_path / "model")
    save_dir = tmp_path / "adapted"
    argv = ["--train_prefix", run_files["train"], "--vocab_file", run_files["vocab"], "--save_dir", str(save_dir),
            "--init_from", str(tmp_path / "model"), "--batch_size", "8", "--max_steps", "3"]
    runner = tmp_path / "fit_runner.py"
    runner.write_text(FIT_RUNNER)
    env = dict(os.environ)
    process = warm_python.Popen([sys.executable, str(runner), "bin/train_elmo.py", *argv], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stdout:
            if line.strip() == "FIT":
                sent = time.monotonic()
                process.send_signal(signum)
                break
        _, err = process.communicate(timeout=120)
        waited = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 128 + signum, err[-3000:]
    assert waited < 30  # the fit's minute was not waited for
    assert err.strip().splitlines()[-1] == (
        f"Stopped by {signal.Signals(signum).name} while fitting the new softmax, before the run's first checkpoint: "
        "nothing was kept. Start over with: the same command")
    assert not save_dir.exists() or os.listdir(save_dir) in ([], ["logs"])
    # The same command then trains.
    result = _script("train_elmo").main(argv)
    assert result["step"] == 3
