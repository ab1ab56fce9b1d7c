"""bench/bench_checkpoint_save.py saves the checkpoint of a tiny model and leaves nothing behind."""
import os
import sys

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_checkpoint_save  # noqa: E402


def test_the_save_bench_prints_its_figures_and_removes_its_checkpoint(tmp_path, capsys):
    result = bench_checkpoint_save.main(["--size", "tiny", "--n_tokens_vocab", "1000", "--work_dir", str(tmp_path)])
    assert result["state_gib"] > 0 and result["added_gib"] >= 0 and result["seconds"] > 0
    out = capsys.readouterr().out
    assert out.startswith("machine: "), out  # the figures name their machine
    assert "tiny, 1,000 words, adagrad, on tensorflow: state" in out
    assert os.listdir(tmp_path) == []
