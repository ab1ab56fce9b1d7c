"""bench/bench_gpu.py --quick on the CPU (GPUs hidden): every check runs and passes, as the table and the JSON say."""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT

CHECKS = ("float32, TF32 off, vs CPU float32", "TF32 on, vs CPU float32", "bfloat16 kernels, vs CPU float32",
          "int8 kernels, vs CPU float32", "Keras tagger tiny, string tokens", "Keras tagger tiny, Batcher char ids",
          "same seed twice: identical", "restart to 4: as straight")


@pytest.mark.slow
def test_quick_run_passes_every_check_on_the_cpu(tmp_path):
    results = tmp_path / "results.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # the CPU-only path, also on a machine with a GPU
    done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--quick", "--json", str(results)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, output
    assert done.stdout.startswith("no GPU found: running on the CPU"), output
    assert "all checks passed" in done.stdout, output

    report = json.loads(results.read_text())
    assert report["passed"] and report["quick"] and report["environment"]["gpus"] == []
    checks = [row for row in report["rows"] if row["kind"] == "check"]
    for ending in CHECKS:
        assert any(row["name"].endswith(ending) for row in checks), (ending, [row["name"] for row in checks])
    assert [row for row in checks if row["result"] != "PASS"] == []
    # The CPU is both the reference and the device: float32 and TF32 (no effect on a CPU) agree bit for bit.
    assert [row["value"] for row in checks if "float32, TF32 off" in row["name"] or "TF32 on" in row["name"]] == [0, 0]
    timings = [row for row in report["rows"] if row["kind"] == "timing"]
    assert {row["name"].split(",")[0] for row in timings} == {"embed tiny", "train tiny"}
    assert all(row["value"] > 0 for row in timings)
