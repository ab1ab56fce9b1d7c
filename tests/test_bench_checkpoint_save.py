"""bench/bench_checkpoint_save.py saves both formats of a tiny model and leaves nothing behind."""
import os
import sys

import pytest

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_checkpoint_save  # noqa: E402


@pytest.mark.parametrize("format_", ["run", "tensorflow"])
def test_the_save_bench_prints_its_figures_and_removes_its_checkpoint(tmp_path, capsys, format_):
    result = bench_checkpoint_save.main(["--size", "tiny", "--n_tokens_vocab", "1000", "--format", format_,
                                         "--work_dir", str(tmp_path)])
    assert result["state_gib"] > 0 and result["added_gib"] >= 0 and result["seconds"] > 0
    out = capsys.readouterr().out
    assert out.startswith("machine: "), out  # the figures name their machine
    assert f"tiny, 1,000 words, adagrad, format {format_}: state" in out
    assert os.listdir(tmp_path) == []
