"""Every flag of bin/train_elmo.py and bin/restart.py means the same on TensorFlow, JAX and PyTorch: nothing is
accepted and ignored.

Each flag is given alone, with a value other than its default, to each script's `main` on each backend (a
process a backend; a restart continues a checkpoint written for it). What reaches the backend's run (its
training settings, the loop's settings, the log folder, the held-out stream and the data's identity) is recorded
there, in place of the run's work, and is compared: against the run without the flag (the flag changed
something) and across the backends (it changed the same thing).
"""
import json
import os

import pytest

from backend_processes import json_result, run_on_backend
from training_helpers import tiny_options, write_corpus

pytestmark = pytest.mark.slow  # a process per backend: over the fast tier's 3 s

RECORD = '''
import dataclasses, json, os, runpy, sys
import numpy as np
from bilm.training.config.training_config import data_fingerprint
from bilm.training.run import loop, run_checkpoint

folder = sys.argv[1]
variants = json.load(open(folder + "/variants.json"))
seen = {}


def record(settings, loop, log_dir, heldout_data, source, save_timer):
    seen.update(settings=dataclasses.asdict(settings), loop=dataclasses.asdict(loop), log_dir=log_dir,
                heldout=heldout_data is not None, source=source, save_every_seconds=save_timer.every_seconds)
    return {"step": 0, "steps_taken": 0, "finished": False, "checkpoint": "-", "n_epochs": settings.n_epochs}


# What reaches the one loop's run on every backend, once the backend's trainer took the flags (a flag it cannot
# honour is refused there).
loop._run_in = (lambda trainer, config, data, save_dir, log_dir, settings, schedule, save_timer, heldout_data:
                record(config.settings, settings, log_dir, heldout_data, config.data_fingerprints[0],
                       save_timer))
scripts = {name: runpy.run_path(f"bin/{name}.py")["main"] for name in ("train_elmo", "restart")}
report = {}
for name, variant in variants.items():
    seen.clear()
    if variant["checkpoint"]:  # a run to continue: its options (n_train_tokens 999) and the data it read
        options, source = variant["checkpoint"]
        os.makedirs(variant["save_dir"])
        run_checkpoint.save_checkpoint(variant["save_dir"], {"x": np.zeros(1)}, 3, options, 0,
                                       data_source=data_fingerprint(source))
    scripts[variant["script"]](variant["argv"])
    report[name] = dict(seen)
print(json.dumps(report))
'''

# Each flag with a value other than its default (--n_gpus, --tf32 and --init_from are tested with the
# devices and the adaptation).
FLAGS = {
    "n_train_tokens": ["--n_train_tokens", "4321"],
    "batch_size": ["--batch_size", "7"],
    "unroll_steps": ["--unroll_steps", "3"],
    "n_epochs": ["--n_epochs", "2"],
    "n_negative_samples_batch": ["--n_negative_samples_batch", "5"],
    "dropout": ["--dropout", "0.2"],
    "learning_rate": ["--learning_rate", "0.05"],
    "softmax_warmup_steps": ["--softmax_warmup_steps", "2"],
    "optimizer": ["--optimizer", "adam"],
    "jit_compile": ["--jit_compile", "true"],
    "max_steps": ["--max_steps", "9"],
    "matmul_dtype": ["--matmul_dtype", "bfloat16"],
    "heldout_prefix": ["--heldout_prefix", "{heldout}"],
    "heldout_every": ["--heldout_every", "3"],
    "checkpoint_every": ["--checkpoint_every", "4"],
    "checkpoint_every_minutes": ["--checkpoint_every_minutes", "2"],
    "log_dir": ["--log_dir", "{folder}/logs"],
    "seed": ["--seed", "3"],
    "size": ["--size", "small"],
}
# The flags whose meaning is not a setting of the run, and where each is tested.
TESTED_ELSEWHERE = {
    "n_gpus": "tests/commands/test_devices.py (devices), tests/training/test_distribution.py (replicas)",
    "tf32": "tests/commands/test_devices.py", "nondeterministic": "tests/commands/test_devices.py",
}


def test_the_walk_covers_every_training_flag():
    # A flag added to the scripts is walked below, or named with the test that covers it.
    import argparse

    from bilm.commands.training_arguments import add_training_arguments

    flags = {action.dest for action in add_training_arguments(argparse.ArgumentParser())}
    assert flags - {"train_prefix", "vocab_file", "save_dir"} == set(FLAGS) - {"size"} | set(TESTED_ELSEWHERE)


# bin/restart.py takes the same flags but the model's (its checkpoint's options are the run's).
RESTART_FLAGS = {name: flag for name, flag in FLAGS.items() if name != "size"}


def test_every_flag_of_train_elmo_and_restart_means_the_same_on_tensorflow_jax_and_pytorch(tmp_path):
    corpus = write_corpus(tmp_path)
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"])
    del options["n_train_tokens"]  # counted from the shards unless --n_train_tokens
    (tmp_path / "options.json").write_text(json.dumps(options))
    data = ["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"]]
    reports = {}
    for backend in ("tensorflow", "jax", "torch"):
        folder = tmp_path / backend
        folder.mkdir()
        variants = {}
        for name, flag in {"baseline": [], **FLAGS}.items():
            model = [] if name == "size" else ["--options_file", str(tmp_path / "options.json")]
            variants[name] = {"script": "train_elmo", "checkpoint": None, "save_dir": str(folder / f"run_{name}"),
                              "argv": [*data, "--save_dir", str(folder / f"run_{name}"), *model,
                                       *[word.format(heldout=corpus["heldout"], folder=folder) for word in flag]]}
        # A restart on the data its checkpoint read keeps its token count (999); on other data it counts anew.
        for source, name in ((os.path.abspath(corpus["train"]), "restart"), ("another corpus", "restart_other_data")):
            for flag_name, flag in {"": [], **RESTART_FLAGS}.items():
                key = f"{name}_{flag_name}" if flag_name else name
                if flag_name and source != os.path.abspath(corpus["train"]):
                    continue
                save_dir = str(folder / f"run_{key}")
                variants[key] = {"script": "restart", "save_dir": save_dir,
                                 "checkpoint": [{**options, "n_train_tokens": 999}, source],
                                 "argv": [*data, "--save_dir", save_dir,
                                          *[word.format(heldout=corpus["heldout"], folder=folder) for word in flag]]}
        (folder / "variants.json").write_text(json.dumps(variants))
        reports[backend] = json_result(run_on_backend(backend, RECORD, folder, environment={"BILM_COMMAND": "1"}))
    for backend, report in reports.items():
        for name in report:  # each run's own directory and log folder, as the flags name them
            if report[name]["log_dir"]:
                report[name]["log_dir"] = report[name]["log_dir"].replace(str(tmp_path / backend), "<folder>")
                report[name]["log_dir"] = report[name]["log_dir"].replace(f"run_{name}", "run")
    tensorflow = reports["tensorflow"]
    for name in FLAGS:
        assert tensorflow[name] != tensorflow["baseline"], f"--{name} changed nothing on TensorFlow"
    for name in RESTART_FLAGS:
        assert tensorflow[f"restart_{name}"] != tensorflow["restart"], f"restart --{name} changed nothing"
    assert tensorflow["restart"]["settings"]["n_train_tokens"] == 999
    counted = tensorflow["restart_other_data"]["settings"]["n_train_tokens"]
    assert counted == tensorflow["baseline"]["settings"]["n_train_tokens"] != 999
    for backend in ("jax", "torch"):
        report = reports[backend]
        assert set(report) == set(tensorflow)
        for name in tensorflow:
            assert report[name] == tensorflow[name], f"{name}: {backend}'s run got {report[name]}, " \
                                                     f"TensorFlow's {tensorflow[name]}"
