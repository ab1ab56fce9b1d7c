"""One run writes a save_dir at a time: a second one is refused in one line, before it touches the directory."""
import os
import sys

import pytest

import warm_python
from bilm.io.formats.output_files import OutputLockedError
from bilm.training.run.loop import train
from helpers import ROOT, ready_process
from training_helpers import checkpoint_numbers, open_data, tiny_options, write_corpus

HOLD_LOCK = """
import sys
from bilm.io.formats.output_files import writer_lock
with writer_lock(sys.argv[1]):
    print("ready", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=200, n_heldout=20)


@pytest.mark.slow
def test_a_second_run_on_a_save_dir_in_use_is_refused_before_it_writes_anything(tmp_path, corpus):
    options = tiny_options()
    save_dir = tmp_path / "run"
    save_dir.mkdir()
    holder = ready_process(HOLD_LOCK, save_dir)
    try:
        with pytest.raises(OutputLockedError, match=str(holder.pid)):
            train(options, open_data(options, corpus), 1, save_dir, None, max_steps=2, verbose=0)
        assert os.listdir(save_dir) == []
    finally:
        holder.stdin.close()
        holder.wait(30)
    # Once the other run is over (or killed: the kernel drops a dead process's lock), the save_dir is free.
    train(options, open_data(options, corpus), 1, save_dir, None, max_steps=2, verbose=0)
    assert checkpoint_numbers(save_dir) == [2]
    assert not os.path.exists(f"{save_dir}.lock")


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_elmo.py", "restart.py"])
def test_the_training_scripts_say_in_one_line_that_another_process_writes_the_save_dir(tmp_path, corpus, script):
    # A save_dir with a checkpoint, which both scripts would take up (restart.py continues it).
    options = tiny_options()
    save_dir = tmp_path / "run"
    train(options, open_data(options, corpus), 1, save_dir, None, max_steps=2, verbose=0)
    before = sorted(os.listdir(save_dir))
    holder = ready_process(HOLD_LOCK, save_dir)
    try:
        result = warm_python.run(
            [sys.executable, os.path.join(ROOT, "bin", script), "--train_prefix", corpus["train"],
             "--vocab_file", corpus["vocab"], "--save_dir", str(save_dir),
             *(["--options_file", str(save_dir / "options.json")] if script == "train_elmo.py" else [])],
            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and str(holder.pid) in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert sorted(os.listdir(save_dir)) == before
