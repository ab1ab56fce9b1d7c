"""The flags of bin/train_elmo.py and bin/restart.py, what they hand to train_from_files, and the closing line."""
import argparse

import pytest

import bilm.commands.training_arguments as training_arguments
from bilm.commands.training_arguments import (
    add_training_arguments,
    describe_result,
    restart_command,
    train_from_args,
)

REQUIRED = ["--train_prefix", "data/train/*", "--vocab_file", "vocab.txt", "--save_dir", "ckpt"]


def _parser():
    parser = argparse.ArgumentParser(prog="train_elmo.py")
    add_training_arguments(parser)
    return parser


def test_defaults_leave_the_options_to_the_options_file():
    args = vars(_parser().parse_args(REQUIRED))
    assert args == {"train_prefix": "data/train/*", "vocab_file": "vocab.txt", "save_dir": "ckpt",
                    "n_train_tokens": None, "n_epochs": None, "batch_size": None, "unroll_steps": None,
                    "n_negative_samples_batch": None, "learning_rate": None, "dropout": None, "optimizer": None,
                    "softmax_warmup_steps": None, "jit_compile": None, "max_steps": None, "matmul_dtype": None,
                    "n_gpus": None,
                    "heldout_prefix": None,
                    "heldout_every": None, "checkpoint_every": 1250, "checkpoint_every_minutes": 30, "log_dir": None,
                    "seed": 0, "tf32": False, "nondeterministic": False}


@pytest.mark.parametrize("flags", [REQUIRED[2:], REQUIRED[:2] + REQUIRED[4:], REQUIRED[:4],
                                   REQUIRED + ["--matmul_dtype", "float16"], REQUIRED + ["--n_epochs", "two"],
                                   REQUIRED + ["--batch_size", "0"], REQUIRED + ["--dropout", "1.5"],
                                   REQUIRED + ["--learning_rate", "-1"], REQUIRED + ["--optimizer", "sgd"],
                                   REQUIRED + ["--jit_compile", "yes"]])
def test_missing_or_bad_flags_are_usage_errors(flags, capsys):
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(flags)
    assert stop.value.code == 2 and "error:" in capsys.readouterr().err


@pytest.mark.parametrize("restart, options_file", [(False, "options.json"), (True, None)])
def test_every_flag_reaches_train_from_files_and_malloc_is_tuned(monkeypatch, restart, options_file):
    calls = []
    monkeypatch.setattr(training_arguments, "train_from_files", lambda *a, **k: calls.append((a, k)) or {"step": 3})
    args = _parser().parse_args(REQUIRED + ["--n_train_tokens", "1000", "--n_epochs", "2", "--batch_size", "8",
                                            "--matmul_dtype", "bfloat16", "--n_gpus", "2", "--heldout_prefix", "h/*",
                                            "--heldout_every", "50", "--checkpoint_every", "100", "--log_dir", "logs",
                                            "--seed", "5", "--dropout", "0.2", "--checkpoint_every_minutes", "5",
                                            "--optimizer", "adam", "--max_steps", "30", "--jit_compile", "true"])
    if options_file:  # bin/train_elmo.py's own flag; bin/restart.py has none
        args.options_file = options_file
    assert train_from_args(args, restart=restart) == {"step": 3}
    ((positional, keywords),) = calls
    assert positional == ("data/train/*", "vocab.txt", "ckpt", options_file)
    assert keywords == {"size": None, "restart": restart, "n_train_tokens": 1000, "matmul_dtype": "bfloat16",
                        "overrides": {"n_epochs": 2, "batch_size": 8, "unroll_steps": None,
                                      "n_negative_samples_batch": None, "learning_rate": None, "dropout": 0.2,
                                      "optimizer": "adam", "softmax_warmup_steps": None, "jit_compile": True,
                                      "max_steps": 30},
                        "n_gpus": 2, "heldout_prefix": "h/*", "heldout_every": 50, "checkpoint_every": 100,
                        "checkpoint_every_minutes": 5.0, "log_dir": "logs", "seed": 5, "tune_malloc": True,
                        "save_on_signals": True}


def test_without_n_gpus_training_gets_one_device(monkeypatch):
    calls = []
    monkeypatch.setattr(training_arguments, "train_from_files", lambda *a, **k: calls.append(k) or {"step": 3})
    args = _parser().parse_args(REQUIRED)
    args.options_file = None
    train_from_args(args)
    assert calls[0]["n_gpus"] == 1


def test_the_restart_command_repeats_the_flags_given_and_tf32_as_a_switch(monkeypatch):
    monkeypatch.setattr(training_arguments, "script_command", lambda name: [name])
    args = _parser().parse_args(REQUIRED + ["--n_gpus", "1", "--seed", "3", "--tf32"])
    assert restart_command(args) == ("restart.py --train_prefix 'data/train/*' --vocab_file vocab.txt --save_dir ckpt "
                                     "--n_gpus 1 --seed 3 --tf32")
    assert "--tf32" not in restart_command(_parser().parse_args(REQUIRED))


def test_the_closing_line_names_the_checkpoint():
    result = {"step": 40, "steps_taken": 40, "finished": True, "n_epochs": 1, "checkpoint": "ckpt/model.ckpt-40"}
    assert describe_result(result, "ckpt") == "Finished at step 40: ckpt/model.ckpt-40"
    assert describe_result({**result, "finished": False}, "ckpt") == "Finished at step 40: ckpt/model.ckpt-40"


def test_a_finished_run_says_how_to_train_longer_or_on_other_text():
    result = {"step": 40, "steps_taken": 0, "finished": True, "n_epochs": 2, "checkpoint": "ckpt/model.ckpt-40"}
    assert describe_result(result, "ckpt") == (
        "Nothing to train: the run in ckpt has finished its 2 epoch(s) (step 40). To train longer on the same "
        "data, rerun bin/restart.py with a larger --n_epochs (e.g. --n_epochs 4); to fine-tune on other text, "
        "pass its shards as --train_prefix.")
