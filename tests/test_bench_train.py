"""bench/bench_train.py: trains a few steps at the tiny size through the one training driver on each backend (on JAX
and PyTorch in a process where TensorFlow cannot be imported), and prints its tokens/sec, compile time, peak memory
and TFLOP/s."""
import os
import re
import subprocess
import sys

import pytest

from backend_processes import WITHOUT_TENSORFLOW
from helpers import ROOT

ARGS = ("--backend", "jax", "--size", "tiny", "--batch_size", "4", "--unroll_steps", "5", "--n_tokens_vocab", "1003",
        "--n_negative", "64", "--warmup", "1", "--steps", "2")


# Counts every attempt to import TensorFlow (the hook of WITHOUT_TENSORFLOW then fails it), and prints the count
# at exit: a library that imports TensorFlow when it can (Keras' `set_random_seed` does) would load it where it is
# installed.
COUNT_ATTEMPTS = """
import atexit
class _Attempts(importlib.abc.MetaPathFinder):
    names = []
    def find_spec(self, name, path, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            self.names.append(name)
        return None
sys.meta_path.insert(0, _Attempts())
atexit.register(lambda: print(f"TensorFlow import attempts: {len(_Attempts.names)}"))
"""


def number(pattern, text):
    found = re.search(pattern, text, re.MULTILINE)
    assert found, (pattern, text)
    return float(found.group(1).replace(",", ""))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_the_training_bench_runs_on_every_backend_and_prints_its_figures(backend):
    blocked = "" if backend == "tensorflow" else WITHOUT_TENSORFLOW + COUNT_ATTEMPTS
    code = blocked + ("import runpy, sys\n"
                      "sys.argv = ['bench/bench_train.py', *sys.argv[1:]]\n"
                      "runpy.run_path('bench/bench_train.py', run_name='__main__')\n")
    # KERAS_BACKEND says another backend: the script itself must switch Keras to --backend before importing it.
    env = dict(os.environ, KERAS_BACKEND="jax" if backend == "tensorflow" else "tensorflow", JAX_PLATFORMS="cpu",
               CUDA_VISIBLE_DEVICES="")
    args = [backend if arg == "jax" else arg for arg in ARGS]
    if backend == "jax":  # no --backend: KERAS_BACKEND's, as Keras's own default
        env["KERAS_BACKEND"], args = "jax", args[2:]
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    output = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, output
    assert "No module named 'tensorflow'" not in output, output
    assert f"{backend} on cpu" in done.stdout
    assert "size tiny, batch 4 x 5, n_tokens_vocab 1,003, 64 negatives" in done.stdout
    assert number(r"^tokens/sec: ([\d,]+) ", done.stdout) > 0
    assert number(r"\(ceiling ([\d,]+) tokens/sec\)", done.stdout) > 0  # on a CPU
    assert number(r"^compile time \(first step\): ([\d.]+) s", done.stdout) > 0
    assert number(r"^peak memory: host RSS ([\d.]+) GiB", done.stdout) > 0
    assert number(r"^TFLOP/s: ([\d.]+) \(analytic ([\d.,]+) GFLOP per step", done.stdout) > 0
    assert number(r"GFLOP per step, forward \+ backward, x (\d+) steps", done.stdout) == 2
    assert re.search(rf"^{backend} +vocab +1,000: +[\d,]+ tokens/sec", done.stdout, re.MULTILINE), done.stdout
    assert f"TensorFlow imported: {'yes' if backend == 'tensorflow' else 'no'}" in done.stdout
    # On PyTorch, torch._dynamo looks for TensorFlow (find_spec) as Keras imports it; it imports none.
    assert backend != "jax" or "TensorFlow import attempts: 0" in done.stdout


@pytest.mark.slow
def test_the_device_check_of_the_jax_step_runs_without_tensorflow_and_passes_on_the_cpu():
    # On a machine without a GPU the device is the CPU: the checks hold exactly, and the mechanics (two steps
    # from one start, the state compared array by array, the verdict and exit status) are what is tested.
    code = WITHOUT_TENSORFLOW + COUNT_ATTEMPTS + ("import runpy\n"
                                 "sys.argv = ['bench/bench_jax_step_on_device.py', *sys.argv[1:]]\n"
                                 "runpy.run_path('bench/bench_jax_step_on_device.py', run_name='__main__')\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", code, "--quick", "--steps", "2"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, output
    assert "on cpu (cpu) against cpu: size tiny" in done.stdout and "; 2 steps" in done.stdout, output
    assert done.stdout.startswith("machine: "), output  # the figures name their machine
    verdicts = [line.split(":")[0] for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert verdicts == ["PASS  device against the CPU", "PASS  device against the CPU",
                        "PASS  device twice from one start"], output
    found = re.search(r"the state after the last step: 0\.00e\+00 at .* \(allowed (\S+): the tolerance 0\.0001 or "
                      r"10 x the CPU's own spread (\S+); \d+ arrays\)", done.stdout)
    assert found, output
    # The nudged start moved the CPU's state (the spread is measured, not zero), and the allowance follows it.
    allowed, spread = float(found[1]), float(found[2])
    assert 0 < spread and allowed == pytest.approx(max(1e-4, 10 * spread), rel=0.01), output
    assert "all checks passed" in done.stdout and "TensorFlow import attempts: 0" in done.stdout, output
