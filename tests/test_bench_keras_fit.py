"""bench/bench_keras_fit.py: a tagger's `fit` steps with ELMo inside, frozen or fine-tuned, each backend in a process
of its own; one row of figures a backend. Run on PyTorch, which starts fastest: the bench's code is the same for
each, and the tagger's training on every backend is tests/backends/test_keras_models.py's."""
import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT


@pytest.mark.slow  # a process
def test_the_keras_fit_bench_prints_a_backends_steps(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_keras_fit.py"), "--size", "tiny",
                          "--batch_size", "4", "--length", "6", "--warmup", "0", "--steps", "1", "--backends", "torch",
                          "--work_dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("machine: ") and "tiny size, frozen biLM: batches of 4 x 6 words" in run.stdout
    rows = {found.group(1): [float(x.replace(",", "")) for x in found.groups()[1:]] for found in re.finditer(
        r"^\| (\w+) \| ([\d,]+) \| (\d+) \| ([\d.]+) \| ([\d,]+) \| ([\d.]+), ([\d.]+) \| ([\d.]+) \|$", run.stdout,
        re.MULTILINE)}
    assert set(rows) == {"torch"}, run.stdout
    for backend, (tokens, step_ms, first, predict, loss_first, loss_last, peak) in rows.items():
        assert tokens > 0 and predict > 0 and first > 0 and peak > 0, (backend, rows[backend])
        assert 0 < loss_last < 2 * loss_first, (backend, rows[backend])  # finite, near ln 3 at the start
    assert os.listdir(tmp_path) == ["model-tiny"]
