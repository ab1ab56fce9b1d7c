"""Every flag of bin/train_elmo.py means the same on TensorFlow, JAX and PyTorch: nothing is accepted and ignored.

Each flag is given alone, with a value other than its default, to the script's `main` on each backend, in a
process of its own. What reaches the backend's run (its training settings, the loop's settings, the log
folder, the held-out stream and the data's identity) is recorded there, in place of the run's work, and is
compared: against the run without the flag (the flag changed something) and across the backends (it changed
the same thing).
"""
import json

import pytest

from backend_processes import json_result, run_on_backend
from training_helpers import tiny_options, write_corpus

pytestmark = pytest.mark.slow  # a process per backend: over the fast tier's 3 s

RECORD = '''
import dataclasses, json, runpy, sys
from bilm.training.config.training_config import data_fingerprint
from bilm.training.run import loop

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
                record(config.settings, settings, log_dir, heldout_data, data_fingerprint(config.data_source),
                       save_timer))
main = runpy.run_path("bin/train_elmo.py")["main"]
report = {}
for name, argv in variants.items():
    seen.clear()
    main(argv)
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


def test_every_flag_of_train_elmo_means_the_same_on_tensorflow_jax_and_pytorch(tmp_path):
    corpus = write_corpus(tmp_path)
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"])
    del options["n_train_tokens"]  # counted from the shards unless --n_train_tokens
    (tmp_path / "options.json").write_text(json.dumps(options))
    reports = {}
    for backend in ("tensorflow", "jax", "torch"):
        folder = tmp_path / backend
        folder.mkdir()
        variants = {}
        for name, flag in {"baseline": [], **FLAGS}.items():
            model = [] if name == "size" else ["--options_file", str(tmp_path / "options.json")]
            flag = [word.format(heldout=corpus["heldout"], folder=folder) for word in flag]
            variants[name] = ["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"], "--save_dir",
                              str(folder / f"run_{name}"), *model, *flag]
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
    for backend in ("jax", "torch"):
        report = reports[backend]
        assert set(report) == set(tensorflow) == {"baseline", *FLAGS}
        for name in ("baseline", *FLAGS):
            assert report[name] == tensorflow[name], f"--{name}: {backend}'s run got {report[name]}, " \
                                                     f"TensorFlow's {tensorflow[name]}"


RESTART = '''
import dataclasses, json, os, runpy, sys
import numpy as np
from bilm.training.config.training_config import data_fingerprint
from bilm.training.run import loop, run_checkpoint as checkpoints

folder, train_prefix, vocab = sys.argv[1:4]
options = json.load(open(folder + "/options.json"))
seen = []
loop._run_in = lambda trainer, config, *args: seen.append(config.settings.n_train_tokens) or {
    "step": 3, "steps_taken": 0, "finished": False, "checkpoint": "-", "n_epochs": 1}
main = runpy.run_path("bin/restart.py")["main"]
for name, source in (("same", os.path.abspath(train_prefix)), ("other", "another corpus")):
    save_dir = f"{folder}/{name}"
    os.makedirs(save_dir)
    checkpoints.save_checkpoint(save_dir, {"x": np.zeros(1)}, 3, {**options, "n_train_tokens": 999}, 0,
                                data_source=data_fingerprint(source))
    main(["--train_prefix", train_prefix, "--vocab_file", vocab, "--save_dir", save_dir])
print(json.dumps(seen))
'''


def test_a_restart_on_jax_on_other_data_counts_its_tokens_as_tensorflows_does(tmp_path):
    corpus = write_corpus(tmp_path)
    (tmp_path / "options.json").write_text(json.dumps(tiny_options(n_tokens_vocab=corpus["n_vocab"])))
    result = run_on_backend("jax", RESTART, tmp_path, corpus["train"], corpus["vocab"],
                            environment={"BILM_COMMAND": "1"})
    same, other = json.loads(result.stdout.strip().splitlines()[-1])
    assert same == 999  # the checkpoint's count, on the data it was reading
    assert other != 999 and f"Counted {other:,} tokens in {corpus['train']}." in result.stdout
