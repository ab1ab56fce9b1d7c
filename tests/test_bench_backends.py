"""bench/bench_backends.py: every installed backend runs the tiny model and agrees with TensorFlow; without
TensorFlow it runs on JAX and PyTorch against its float64 NumPy pass; an existing report is kept without
--overwrite; SIGINT and SIGTERM stop it with one line and no child left."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT

SCRIPT = os.path.join(ROOT, "bench", "bench_backends.py")
BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
INSTALLED = [backend for backend, module in BACKENDS.items() if importlib.util.find_spec(module) is not None]
# Only the CPU, also on a machine with a GPU: the figures checked here are the CPU's.
ENV = dict(os.environ, CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")


def run_bench(*flags, env=ENV):
    return subprocess.run([sys.executable, SCRIPT, "--size", "tiny", *flags], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def check_ran(entry, batch_sizes, tolerance=1e-4):
    assert entry["status"] == "ran", entry
    assert [r["batch_size"] for r in entry["results"]] == batch_sizes
    for r in entry["results"]:
        assert r["tokens_per_sec"] > 0 and r["first_call_seconds"] > 0 and r["peak_rss_gib"] > 0, r
        assert r["device"].startswith("cpu") and r["peak_device_memory_gib"] is None, r
        assert r["max_abs_deviation"] < tolerance and r["max_abs_deviation_float64"] < tolerance, r


@pytest.mark.slow
def test_every_installed_backend_runs_and_leaves_only_its_report(tmp_path):
    # --max_length: sentences of many lengths, each call its own shape (JAX pads time to a few lengths); every
    # backend's vectors of the checked sentences still line up with the reference's one batch of them.
    report_file = tmp_path / "report.json"
    done = run_bench("--batch_sizes", "1,4", "--sentences", "6", "--length", "2", "--max_length", "11", "--output",
                     str(report_file))
    output = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, output
    report = json.loads(report_file.read_text())
    assert (report["length"], report["max_length"]) == (2, 11) and "2-11-token sentences" in done.stdout
    assert list(report["backends"]) == list(BACKENDS)
    for backend, entry in report["backends"].items():
        if backend in INSTALLED:
            check_ran(entry, [1, 4])
        else:
            assert entry["status"] == "skipped" and "not installed" in entry["reason"], entry
    if "tensorflow" in INSTALLED:
        assert report["reference"]["description"] == "tensorflow float32 at batch size 1"
        assert report["backends"]["tensorflow"]["results"][0]["is_reference"]
    assert report["reference"]["sentences"] == 6 and report["reference"]["max_abs_value"] > 0
    assert "tokens/sec" in done.stdout and "max|dev| ref" in done.stdout
    # The fraction of the matmul rate counts the products that ran: the encoder once per word new to the cache.
    for entry in report["backends"].values():
        for result in entry["results"]:
            assert 0 <= result["encoded_tokens"] <= result["timed_tokens"] + 2, result  # the boundaries' too
            bound = report["machine"]["float32_matmul_gflops"]
            assert result["fraction_of_matmul_rate"] == pytest.approx(result["gflops"] / result["seconds"] / bound)

    assert os.listdir(tmp_path) == ["report.json"]  # no temporary file left (an existing report is refused:
    # test_an_existing_report_is_refused_before_any_work)


def test_a_longest_sentence_shorter_than_the_shortest_is_refused():
    refused = run_bench("--length", "5", "--max_length", "4")
    assert refused.returncode == 2 and "--max_length must be >= --length (5); received 4" in refused.stderr


# Python's finders, each wrapped to find no `tensorflow` (children inherit PYTHONPATH): as on a machine without
# it, `import tensorflow` fails and `importlib.util.find_spec("tensorflow")` is None.
NO_TENSORFLOW = """
import sys

class WithoutTensorFlow:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)

sys.meta_path[:] = [WithoutTensorFlow(finder) for finder in sys.meta_path]
"""


@pytest.mark.slow
@pytest.mark.skipif(not {"jax", "torch"} & set(INSTALLED), reason="neither JAX nor PyTorch is installed")
def test_without_tensorflow_jax_and_torch_run_against_float64_numpy(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(NO_TENSORFLOW)
    env = dict(ENV, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), ENV.get("PYTHONPATH")])))
    report_file = tmp_path / "report.json"
    done = run_bench("--batch_sizes", "2", "--sentences", "2", "--length", "5", "--output", str(report_file),
                     env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    report = json.loads(report_file.read_text())
    assert report["backends"]["tensorflow"]["status"] == "skipped"
    assert report["backends"]["tensorflow"]["reason"] == "not installed: no module named 'tensorflow'"
    assert report["reference"]["description"].startswith("float64 NumPy")
    for backend in {"jax", "torch"} & set(INSTALLED):
        check_ran(report["backends"][backend], [2])


def test_an_existing_report_is_refused_before_any_work(tmp_path):
    report_file = tmp_path / "report.json"
    report_file.write_text("mine")
    refused = run_bench("--output", str(report_file))
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.strip() == f"Error: {report_file} exists; pass --overwrite to replace it."
    assert report_file.read_text() == "mine"


def _children(pid):
    """The pids of `pid`'s child processes (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or not INSTALLED, reason="reads /proc; needs a backend")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_child_and_exits_with_one_line(signum):
    process = subprocess.Popen([sys.executable, SCRIPT, "--size", "tiny", "--batch_sizes", "1"], cwd=ROOT, env=ENV,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        children = []
        while not children and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
            children = _children(process.pid)
        assert children, "no child process started"
        time.sleep(0.5)  # the child is importing its backend
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signum, stderr
    assert stderr.strip() == f"Stopped by {signum.name}.", stderr
    assert all(not os.path.exists(f"/proc/{pid}") for pid in children)
