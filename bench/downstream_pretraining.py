"""The pretraining stage of bench_downstream.py: a small biLM trained with bin/ scripts on real text.

`pretrained_models(work_dir, ...)` writes the corpus (the dictionary and the
task's unlabelled text, `downstream_data`), builds its vocabulary, trains
with `bin/train_elmo.py` for the first budget, dumps the weights with
`bin/dump_weights.py` and measures the held-out perplexity with
`bin/run_test.py`; each later budget continues the same run with
`bin/restart.py --n_epochs` and is dumped the same way. Each dumped model
is kept in `work_dir/pretrained/epochs_<E>/` with a `pretraining.json`
(written last) that records how it was made; a later run reuses it only
when that record matches.
"""
import os
import re
import shutil
import subprocess
import sys
import time

import downstream_data
import harness
from common import REFERENCE_MODEL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benches' reference biLM with 128 more filters, of width 5.
ARCHITECTURE = {"lstm": REFERENCE_MODEL["lstm"], "char_cnn": {
    **REFERENCE_MODEL["char_cnn"], "filters": [*REFERENCE_MODEL["char_cnn"]["filters"], [5, 128]]}}
SETTINGS = {"batch_size": 64, "unroll_steps": 20, "n_negative_samples_batch": 1024, "dropout": 0.1,
            "optimizer": "adam", "learning_rate": 0.002, "all_clip_norm_val": 10.0}
MIN_COUNT = 3


def _run(script, *args):
    """Runs `python bin/<script> args`, passing its output on; returns the output."""
    command = [sys.executable, os.path.join(ROOT, "bin", script), *map(str, args)]
    print("Running:", " ".join(command[1:]), flush=True)
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}) as process:
        for line in process.stdout:
            print("    " + line, end="", flush=True)
            lines.append(line)
    if process.returncode != 0:
        sys.exit(f"Error: {script} failed with status {process.returncode} (its output is above).")
    return "".join(lines)


def _record(model_dir):
    path = os.path.join(model_dir, "pretraining.json")
    if os.path.exists(path) and os.path.exists(os.path.join(model_dir, "weights.hdf5")):
        return harness.read_json(path)
    return None


def pretrained_models(work_dir, epochs, gcide, task_sentences):
    """`{n_epochs: model directory}` for each budget in `epochs` (ascending), trained once and cached.

    A budget whose model was made the same way before is reused; the first
    one that was not is trained, continuing the run of the budget before it
    when that one is reused and its checkpoints are still there.

    Args:
        work_dir: the bench's directory (it owns everything under it).
        epochs: budgets, in epochs over the corpus, e.g. `(1, 2)`.
        gcide: the dictionary's dictd file.
        task_sentences: the task's unlabelled text, token lists (the
            training split's snippets and the plot synopses, never dev or test).
    """
    how = {"architecture": ARCHITECTURE, "settings": SETTINGS, "min_count": MIN_COUNT,
           "n_task_sentences": len(task_sentences)}
    models = {n: os.path.join(work_dir, "pretrained", f"epochs_{n}") for n in epochs}
    corpus = os.path.join(work_dir, "corpus")
    train_glob = os.path.join(corpus, "train", "shard_*.txt")
    vocab = os.path.join(corpus, "vocab.txt")
    save_dir = os.path.join(work_dir, "pretrain_checkpoints")
    continuing = False  # whether save_dir holds the run of the budget before
    for n in epochs:
        record = _record(models[n])
        if _comparable(record, {**how, "n_epochs": n}):
            continuing = os.path.exists(os.path.join(save_dir, "checkpoint"))
            n_tokens = record["n_train_tokens"]
            continue
        started = time.perf_counter()
        if continuing:
            _run("restart.py", "--train_prefix", train_glob, "--vocab_file", vocab, "--save_dir", save_dir,
                 "--n_epochs", n)
        else:
            _, _, n_tokens = downstream_data.write_pretraining_corpus(corpus, gcide, task_sentences)
            _run("build_vocab.py", "--train_prefix", train_glob, "--vocab_file", vocab, "--min_count", MIN_COUNT)
            shutil.rmtree(save_dir, ignore_errors=True)
            options_file = os.path.join(work_dir, "pretrain_options.json")
            harness.write_report({**ARCHITECTURE, **SETTINGS, "n_epochs": n}, options_file, overwrite=True)
            _run("train_elmo.py", "--train_prefix", train_glob, "--vocab_file", vocab, "--save_dir", save_dir,
                 "--options_file", options_file)
        _dump_and_record(save_dir, models[n], corpus, started,
                         {**how, "n_epochs": n, "n_train_tokens": n_tokens})
        continuing = True
    return models


def adapted_to_task(work_dir, epochs, task_epochs, task_sentences):
    """The model of budget `epochs` trained on for `task_epochs` epochs over the task's unlabelled text alone.

    The general run's latest checkpoint (`pretrained_models` leaves it at
    its last budget, `epochs`) is copied to `pretrain_checkpoints_task/`
    and continued there with `bin/restart.py` on new data (optimizer state
    and softmax kept), then dumped to `pretrained/epochs_<E>+task_<N>/` and
    cached like the budgets (its held-out perplexity is on the general
    held-out file, which is mostly dictionary text). Returns its directory.
    """
    how = {"architecture": ARCHITECTURE, "settings": SETTINGS, "min_count": MIN_COUNT,
           "n_task_sentences": len(task_sentences), "n_epochs": epochs, "task_epochs": task_epochs}
    model_dir = os.path.join(work_dir, "pretrained", f"epochs_{epochs}+task_{task_epochs}")
    if _comparable(_record(model_dir), how):
        return model_dir
    general = _record(os.path.join(work_dir, "pretrained", f"epochs_{epochs}"))
    save_dir = os.path.join(work_dir, "pretrain_checkpoints_task")
    general_dir = os.path.join(work_dir, "pretrain_checkpoints")
    if general is None or not os.path.exists(os.path.join(general_dir, "checkpoint")):
        sys.exit(f"Error: no pretraining run of {epochs} epoch(s) in {general_dir} to adapt; run the bench with "
                 f"--epochs {epochs} first.")
    started = time.perf_counter()
    corpus = os.path.join(work_dir, "corpus")
    task_glob = downstream_data.write_task_corpus(os.path.join(corpus, "task"), task_sentences)
    shutil.rmtree(save_dir, ignore_errors=True)
    shutil.copytree(general_dir, save_dir, ignore=shutil.ignore_patterns("logs"))
    _run("restart.py", "--train_prefix", task_glob, "--vocab_file", os.path.join(corpus, "vocab.txt"),
         "--save_dir", save_dir, "--n_epochs", task_epochs)
    n_tokens = sum(len(tokens) for tokens in task_sentences)
    _dump_and_record(save_dir, model_dir, corpus, started, {**how, "n_train_tokens": n_tokens})
    return model_dir


def _dump_and_record(save_dir, model_dir, corpus, started, record):
    """Dumps the latest checkpoint of `save_dir` to `model_dir`, measures it, and writes its record last."""
    seconds = time.perf_counter() - started
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(model_dir)
    _run("dump_weights.py", "--save_dir", save_dir, "--outfile", os.path.join(model_dir, "weights.hdf5"),
         "--options_outfile", os.path.join(model_dir, "options.json"))
    out = _run("run_test.py", "--test_prefix", os.path.join(corpus, "heldout", "heldout.txt"), "--vocab_file",
               os.path.join(corpus, "vocab.txt"), "--save_dir", save_dir, "--start", "warm")
    perplexity = float(re.findall(r"AVERAGE PERPLEXITY = ([\d.]+)", out)[-1])
    harness.write_report({**record, "train_seconds": round(seconds), "heldout_perplexity": perplexity},
                         os.path.join(model_dir, "pretraining.json"), overwrite=True)
    print(f"Pretrained {os.path.basename(model_dir)} ({seconds / 60:.0f} min more): held-out perplexity "
          f"{perplexity:.1f}", flush=True)


def _comparable(record, wanted):
    return record is not None and all(record.get(key) == value for key, value in wanted.items())
