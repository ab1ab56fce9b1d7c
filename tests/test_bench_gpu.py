"""bench/bench_gpu.py: `--quick` on the CPU (GPUs hidden) runs and passes every check, as its table and JSON say;
a failed or raising check fails the run; its comparisons see a 1% token and a one-ulp weight."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT

CHECKS = ("float32, TF32 off, vs CPU float32", "TF32 on, vs CPU float32", "bfloat16 kernels, vs CPU float32",
          "int8 kernels, vs CPU float32", "Keras tagger tiny, string tokens", "Keras tagger tiny, Batcher char ids",
          "same seed twice: identical", "restart to 4: as straight")


@pytest.mark.slow
def test_quick_run_passes_every_check_on_the_cpu(tmp_path):
    results = tmp_path / "results.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # the CPU-only path, also on a machine with a GPU
    done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--quick", "--output", str(results)], cwd=ROOT,
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


@pytest.fixture(scope="module")
def bench():
    """bench/bench_gpu.py as a module (it puts bench/ on sys.path for `common`; taken off again here)."""
    bench_dir = os.path.join(ROOT, "bench")
    sys.path.insert(0, bench_dir)
    try:
        import bench_gpu
    finally:
        while bench_dir in sys.path:
            sys.path.remove(bench_dir)
    return bench_gpu


def test_a_failed_or_raising_check_fails_the_table_and_timings_never_do(bench, capsys):
    table = bench.Table()
    table.check("agrees", True, "0 differ")
    table.timing("speed", "1 tokens/sec", value=1.0)
    table.skipped("original", "no GPU found")
    assert table.passed
    with table.attempt("raises"):
        raise RuntimeError("out of memory\nmore lines")
    assert not table.passed
    assert table.rows[-1] == {"name": "raises", "kind": "check", "result": "FAIL",
                              "figure": "error: RuntimeError: out of memory"}
    table.print()
    assert "1 check(s) failed" in capsys.readouterr().out


def test_the_deviation_is_the_worst_token_vector_of_any_layer(bench):
    want = [np.ones((3, 2, 4), np.float32), np.ones((3, 0, 4), np.float32)]
    got = [array.copy() for array in want]
    assert bench.max_relative_deviation(got, want) == 0.0
    got[0][2, 1, 0] += 0.02  # |(0.02, 0, 0, 0)| / |(1, 1, 1, 1)| = 0.01
    assert bench.max_relative_deviation(got, want) == pytest.approx(0.01, rel=1e-4)
    with pytest.raises(ValueError, match="shapes differ"):
        bench.max_relative_deviation([want[0][:, :1]], want)


def test_checkpoints_compare_bit_for_bit(bench):
    want = {"model/kernel": np.array([1.0, 2.0], np.float32), "step": np.int64(4), "data/source": b"train/*"}
    assert bench.compare_checkpoints(dict(want), want) == (0, 0.0, 3)
    one_ulp = np.nextafter(np.float32(2.0), np.float32(3.0))
    differing, largest, total = bench.compare_checkpoints(
        dict(want, **{"model/kernel": np.array([1.0, one_ulp], np.float32)}), want)
    assert (differing, total) == (1, 3) and 0 < largest < 1e-6
    with pytest.raises(ValueError, match="other variables"):
        bench.compare_checkpoints({"model/kernel": want["model/kernel"]}, want)
