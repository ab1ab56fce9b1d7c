"""python -m bilm.beam stops within seconds on SIGINT and SIGTERM, whatever it is doing: every process it started
ends, it says why in one line, nothing temporary stays, and a rerun writes what an uninterrupted run writes."""
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import warm_python
from bilm.beam import shard_outputs
from bilm.beam.__main__ import run as run_pipeline
from bilm.beam.embedding_files import remove_temporaries
from bilm.beam.stopping import WORKER_START, descendants

# A stop ends the workers and removes their temporaries: seconds on a quiet machine, twice as many on a busy
# one; a pipeline that carried on would run past any bound.
STOP_WITHIN_S = 20
TRACEBACK_MARKS = ("Traceback", "KeyboardInterrupt", "Exception in thread")
# How often a wait notes the processes started: a look at every process's /proc entry costs CPU that the
# pipeline under test needs, and the processes that matter (the workers) live from their start to the signal.
SCAN_EVERY_S = 0.1


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Two shards, one for each worker process, the second one longer: it is still embedded when the first one's
    file is written, however fast a batch runs."""
    root = tmp_path_factory.mktemp("shards")
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 8))) for _ in range(300)]
    for shard, n_lines in (("a", 250), ("b", 3000)):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 20))) for _ in range(n_lines)]
        (root / f"{shard}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def whole_vectors_model(tmp_path_factory):
    """A tiny model whose widths are multiples of 16, as every published model's: a sentence's vectors are the
    same bytes whatever its process embedded before and whatever shares its batch (docs/embedding.md#the-same-bytes),
    so that the pipeline run in memory, in this process, writes the files that two worker processes write."""
    from helpers import write_model

    return write_model(tmp_path_factory.mktemp("whole_vectors_model"), lstm_dim=16, projection_dim=16,
                       filters=((1, 4), (2, 5), (3, 7)))


def _command(model, shards, output_dir, *runner):
    options_file, weight_file, _ = model
    return [sys.executable, "-m", "bilm.beam", "--input", str(shards / "*.txt"), "--output_dir", str(output_dir),
            "--options_file", options_file, "--weight_file", weight_file, "--runner", "FnApiRunner", *runner]


TWO_WORKERS = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")


class Run:
    """The command in a session of its own (its process group is its own), its stderr and its descendants
    watched; forked from the warm server (`warm_python`): its signals come after the imports, as the moments
    waited for do (a signal during the start: tests/utils/test_start_up.py)."""

    def __init__(self, command, output_dir, env=None):
        self.output_dir = output_dir
        self.before = set(os.listdir(output_dir)) if os.path.isdir(output_dir) else set()
        self.process = warm_python.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, env=env)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stderr), daemon=True)
        self.reader.start()
        self.started = set()

    @property
    def stderr(self):
        return "".join(self.lines)

    def new_entries(self):
        return set(os.listdir(self.output_dir)) - self.before if os.path.isdir(self.output_dir) else set()

    def wait_for(self, moment, timeout=90):
        """Waits until `moment(self)`, noting the processes started meanwhile."""
        deadline = time.monotonic() + timeout
        next_scan = time.monotonic()
        while not moment(self):
            if time.monotonic() >= next_scan:
                self.started.update(descendants(self.process.pid))
                next_scan = time.monotonic() + SCAN_EVERY_S
            assert self.process.poll() is None, f"ended before the moment: {self.stderr[-3000:]}"
            assert time.monotonic() < deadline, f"no such moment within {timeout} s: {self.stderr[-3000:]}"
            time.sleep(0.005)
        self.started.update(descendants(self.process.pid))

    def interrupt(self, signum, group=True):
        """Sends `signum` (to the process group, as a terminal's Ctrl-C does, or to the command alone); returns
        the seconds until the command ended."""
        sent = time.monotonic()
        if group:
            os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)
        try:
            self.process.wait(STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            for pid in self.started:
                _kill(pid)
            pytest.fail(f"still running {STOP_WITHIN_S} s after {signal.Signals(signum).name}: {self.stderr[-3000:]}")
        self.reader.join(5)
        return time.monotonic() - sent

    def survivors(self, timeout=0.0):
        """The processes it started that are still alive (a zombie is dead), after up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            alive = sorted(pid for pid in self.started if _alive(pid))
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.05)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def loading_the_model(run):
    return "holds no boundary state" in run.stderr  # a worker builds its model (this model has no warm state)


def embedding(run):
    return any(name.startswith(".") for name in run.new_entries())  # a shard's file is being built


def a_shard_written(run):
    return any(name.endswith(".hdf5") for name in run.new_entries())


def _assert_stopped(run, signum, seconds):
    name = signal.Signals(signum).name
    assert run.process.returncode == 128 + signum, run.stderr[-3000:]
    assert seconds < STOP_WITHIN_S
    assert run.stderr.endswith(f"\nStopped by {name}.\n") and run.stderr.count("Stopped by") == 1, run.stderr[-3000:]
    assert not [mark for mark in TRACEBACK_MARKS if mark in run.stderr], run.stderr[-3000:]
    assert not run.survivors()  # no worker left behind
    assert not [entry for entry in run.new_entries() if entry.startswith(".")]  # nothing temporary


def _contents(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches processes through /proc")
@pytest.mark.filterwarnings("ignore:.*holds no boundary state:UserWarning")  # the run in this process says it once
def test_two_workers_stop_at_any_moment_and_a_rerun_writes_an_uninterrupted_runs_files(tmp_path, whole_vectors_model,
                                                                                        shards):
    model, out, scratch = whole_vectors_model, tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))  # the runs' temporary folders, Beam's own among them
    # (A signal as the pipeline starts: tests/utils/test_start_up.py.)
    for moment, signum in [(loading_the_model, signal.SIGTERM),
                           (a_shard_written, signal.SIGINT)]:  # the other shard is being embedded
        run = Run(_command(model, shards, out, *TWO_WORKERS), out, env=env)
        run.wait_for(moment)
        _assert_stopped(run, signum, run.interrupt(signum))
        assert len(run.started) >= 2  # the workers were there
        assert os.listdir(scratch) == []

    # What the stopped runs wrote is set aside, to equal the uninterrupted run's files at the end: the killed
    # run below then has both shards to embed (a busy machine can let the second shard's file be written too
    # before the SIGINT lands, which left that run nothing to embed).
    stopped_runs_files = _contents(out)
    assert stopped_runs_files and all(name.endswith(".hdf5") for name in stopped_runs_files)
    for name in stopped_runs_files:
        (out / name).unlink()

    # Killed (SIGKILL: no chance to clean up) in the middle of a shard: its workers die with it, its temporary
    # directory stays, and the next run removes it first.
    run = Run(_command(model, shards, out, *TWO_WORKERS), out, env=env)
    run.wait_for(embedding)
    run.interrupt(signal.SIGKILL, group=False)
    assert len(run.started) >= 2 and not run.survivors(timeout=STOP_WITHIN_S)
    assert [entry for entry in os.listdir(out) if entry.startswith(".")]

    rerun = warm_python.run(_command(model, shards, out, *TWO_WORKERS), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=300, env=env)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    # An uninterrupted run: the same pipeline in memory, in this process (no worker processes to start), which
    # writes the two workers' bytes with this model.
    uninterrupted = tmp_path / "uninterrupted"
    assert run_pipeline(_command(model, shards, uninterrupted)[3:])["shards_written"] == 2
    expected = _contents(uninterrupted)
    assert sorted(expected) == ["a.hdf5", "b.hdf5"]
    assert _contents(out) == expected  # byte for byte, and no other file
    assert {name: expected[name] for name in stopped_runs_files} == stopped_runs_files


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches processes through /proc")
def test_the_in_memory_runner_stops_in_the_middle_of_a_shard(tmp_path, model, shards):
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    run = Run(_command(model, shards, out), out, env=dict(os.environ, TMPDIR=str(scratch)))
    run.wait_for(embedding)
    _assert_stopped(run, signal.SIGINT, run.interrupt(signal.SIGINT))
    assert os.listdir(scratch) == []  # Beam's own scratch folder too


# A driver that starts one worker, as `LocalRunner` does (the worker's own start, then a long wait in place of
# Beam's worker), and reports the worker's PID once the worker has started.
DRIVER_OF_A_SLEEPING_WORKER = """
import os, subprocess, sys
code = sys.argv[1].format(driver=os.getpid()) + "print('started', flush=True)\\nimport time\\ntime.sleep(60)"
worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
assert worker.stdout.readline() == "started\\n"
print(worker.pid, flush=True)
worker.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="death with the parent is Linux's (PR_SET_PDEATHSIG)")
def test_a_worker_dies_with_its_driver_when_the_driver_is_killed():
    # SIGKILL: the driver has no chance to kill its workers; a worker that is busy (not reading from the
    # driver, so not told by a closed connection) still ends at once.
    driver = subprocess.Popen([sys.executable, "-c", DRIVER_OF_A_SLEEPING_WORKER, WORKER_START],
                              stdout=subprocess.PIPE, text=True)
    worker = int(driver.stdout.readline())
    assert _alive(worker)
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + STOP_WITHIN_S
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.01)
    alive = _alive(worker)
    _kill(worker)
    assert not alive


STOPPING_SCRIPT = """
import subprocess, sys, time
from bilm.beam.stopping import stop_on_signals

with stop_on_signals(lambda: open(sys.argv[1], "w").close()):
    subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60; :"])  # a child with a child of its own
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches processes through /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=lambda signum: signum.name)
def test_stop_on_signals_kills_every_descendant_cleans_up_and_exits_with_one_line(tmp_path, signum):
    # No model here: on Keras's NumPy backend the script does not import TensorFlow (4 s of its start).
    process = subprocess.Popen([sys.executable, "-c", STOPPING_SCRIPT, str(tmp_path / "cleaned")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "numpy"})
    assert process.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 10
    while len(descendants(process.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    children = descendants(process.pid)
    assert len(children) == 3  # sh and its two sleeps
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=STOP_WITHIN_S)
    assert process.returncode == 128 + signum
    assert stderr.endswith(f"\nStopped by {signal.Signals(signum).name}.\n") and stderr.count("Stopped") == 1, stderr
    assert not [pid for pid in children if _alive(pid)]
    assert (tmp_path / "cleaned").exists()


def test_a_run_first_removes_what_a_killed_run_was_building_and_nothing_else(tmp_path):
    (tmp_path / "shards").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "shards" / name).write_text("The cat\n")
    out = tmp_path / "out"
    ours = [".a.hdf5.0123456789ab.tmp", ".b.hdf5.456789abcdef.tmp.partial", ".a.hdf5.89abcdef0123.tmp.partial"]
    others = ["a.hdf5.0123456789ab.tmp", ".c.hdf5.0123456789ab.tmp", ".a.hdf5.tmp", ".a.hdf5.0123456789AB.tmp",
              ".a.hdf5.0123456789ab.tmp.lock", ".a.hdf5.0123456789ab.tmpx", "notes.tmp"]
    (out / ".b.hdf5.fedcba987654.tmp").mkdir(parents=True)  # how this pipeline builds a file now
    (out / ".b.hdf5.fedcba987654.tmp" / "b.hdf5.partial").write_bytes(b"half")
    for name in ours + others:
        (out / name).write_text("x")
    shard_outputs(tmp_path / "shards" / "*.txt", out)
    assert sorted(os.listdir(out)) == sorted(others)
    assert remove_temporaries([str(out / "c.hdf5")]) == [str(out / ".c.hdf5.0123456789ab.tmp")]
