"""The training scripts (train_elmo, restart, run_test, dump_weights) end to end, and their errors."""
import importlib.util
import os
import re

import pytest

from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.options import load_options
from bilm.text.batching import Batcher
from bilm.training.data.shards import count_tokens
from helpers import ROOT
from training_helpers import MAX_CHARS, tiny_options, write_corpus


def _script(name):
    spec = importlib.util.spec_from_file_location(f"bin_{name}", os.path.join(ROOT, "bin", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_scripts_train_restart_test_and_dump(tmp_path, capsys):
    corpus = write_corpus(tmp_path, n_train=200, n_heldout=60)
    options_file = tmp_path / "options.json"
    options = tiny_options()
    del options["n_train_tokens"]
    options_file.write_text(__import__("json").dumps(options))
    save_dir = str(tmp_path / "ckpt")
    common = ["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"], "--save_dir", save_dir,
              "--batch_size", "8"]

    first = _script("train_elmo").main(common + ["--options_file", str(options_file), "--n_epochs", "1",
                                                 "--heldout_prefix", corpus["heldout"],
                                                 "--matmul_dtype", "bfloat16"])
    n_tokens = count_tokens(corpus["train"])
    saved = load_options(os.path.join(save_dir, "options.json"))
    assert saved.get("n_train_tokens") == n_tokens and saved.get("matmul_dtype") == "bfloat16"
    steps_per_epoch = n_tokens // (8 * 5)
    assert first["step"] == steps_per_epoch and first["heldout_perplexity"] > 1
    out = capsys.readouterr().out
    assert "Counted" in out and "take bfloat16 operands in training steps" in out

    second = _script("restart").main(common + ["--n_epochs", "2"])
    assert second["step"] == 2 * steps_per_epoch
    capsys.readouterr()
    again = _script("restart").main(common + ["--n_epochs", "2"])
    assert again["step"] == 2 * steps_per_epoch and again["steps_taken"] == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"Nothing to train: the run in {save_dir} has finished its 2 epoch(s) (step {2 * steps_per_epoch}). To "
        "train longer on the same data, rerun bin/restart.py with a larger --n_epochs (e.g. --n_epochs 4); to "
        "fine-tune on other text, pass its shards as --train_prefix.")

    perplexity = _script("run_test").main(["--test_prefix", corpus["heldout"], "--vocab_file", corpus["vocab"],
                                           "--save_dir", save_dir, "--batch_size", "4"])
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"AVERAGE PERPLEXITY = [0-9]+\.[0-9]+", last_line)
    assert abs(float(last_line.split("=")[1]) - perplexity) < 1e-3
    by_start = {start: _script("run_test").main(["--test_prefix", corpus["heldout"], "--vocab_file", corpus["vocab"],
                                                 "--save_dir", save_dir, "--batch_size", "4", "--start", start])
                for start in ("zeros", "warm")}
    # The default is the third start, "carry" (EVALUATION_STARTS): the three figures differ.
    assert len({perplexity, *by_start.values()}) == 3
    capsys.readouterr()

    notes = tmp_path / "notes.hdf5"
    notes.write_text("not bilm's")
    for outfile, message in [(os.path.join(save_dir, "options.json"), "is the input .*options.json"),
                             (str(notes), "notes.hdf5 already exists and is not a file that bilm wrote"),
                             (str(notes / "weights.hdf5"), "notes.hdf5: it is a file, not a directory")]:
        with pytest.raises(SystemExit, match=message):
            _script("dump_weights").main(["--save_dir", save_dir, "--outfile", outfile])
    assert notes.read_text() == "not bilm's"
    written = _script("dump_weights").main(
        ["--save_dir", save_dir, "--outfile", os.path.join(save_dir, "weights.hdf5")])
    model = BidirectionalLanguageModel(written["options_file"], written["weight_file"])
    out = model(Batcher(corpus["vocab"], MAX_CHARS).batch_sentences([["alpha", "bravo"]]))
    assert out["lm_embeddings"].shape == (1, 3, 2, 16)
    assert load_options(os.path.join(save_dir, "options.json")).char_cnn.n_characters == 261


@pytest.mark.parametrize("script, args", [
    ("restart", ["--train_prefix", "x", "--vocab_file", "v"]),
    ("run_test", ["--test_prefix", "x", "--vocab_file", "v"]),
    ("dump_weights", ["--outfile", "w.hdf5"]),
])
def test_scripts_without_a_checkpoint_are_clear_errors(tmp_path, script, args):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="No checkpoint found in .*empty"):
        _script(script).main(args + ["--save_dir", str(tmp_path / "empty")])
    with pytest.raises(SystemExit, match="does not exist"):
        _script(script).main(args + ["--save_dir", str(tmp_path / "missing")])


def test_training_options_with_prediction_characters_is_a_clear_script_error(tmp_path, training_corpus):
    options = tiny_options()
    options["char_cnn"]["n_characters"] = 262
    options_file = tmp_path / "options.json"
    options_file.write_text(__import__("json").dumps(options))
    with pytest.raises(SystemExit, match=f"Error: {options_file}: 'char_cnn.n_characters' is 262.*needs 261"):
        _script("train_elmo").main(["--train_prefix", training_corpus["train"],
                                    "--vocab_file", training_corpus["vocab"],
                                    "--save_dir", str(tmp_path / "ckpt"), "--options_file", str(options_file)])
    options = tiny_options(dropout=2.0)
    options_file.write_text(__import__("json").dumps(options))
    with pytest.raises(SystemExit, match=f"Error: {options_file}: training key 'dropout' must be a number"):
        _script("train_elmo").main(["--train_prefix", training_corpus["train"],
                                    "--vocab_file", training_corpus["vocab"],
                                    "--save_dir", str(tmp_path / "ckpt"), "--options_file", str(options_file)])
