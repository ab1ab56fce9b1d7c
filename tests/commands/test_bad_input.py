"""Every bin/ script answers a user's mistake with one `Error:` line naming the file or flag, never a traceback.

Missing, empty, truncated and wrong-type files, wrong vocabularies and bad
flags, each given to the scripts that read it. The scripts run in this
process (their `main`), as the shell would run them but for the interpreter
start; a few run as subprocesses to check the exit status the shell sees.
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

import warm_python
from helpers import ROOT, write_lines, write_model
from training_helpers import WORDS, tiny_options, write_corpus


def _main(script):
    spec = importlib.util.spec_from_file_location(f"bin_{script}", os.path.join(ROOT, "bin", f"{script}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny model, a corpus, a trained save_dir, and bad files of every kind."""
    root = tmp_path_factory.mktemp("bad_input")
    (root / "model").mkdir()
    options_file, weight_file, _ = write_model(root / "model")
    corpus = write_corpus(root, n_train=60, n_heldout=10)
    options = tiny_options()
    del options["n_train_tokens"]
    training_options = root / "training_options.json"
    training_options.write_text(json.dumps(options))
    save_dir = root / "ckpt"
    _main("train_elmo")(["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"], "--save_dir",
                         str(save_dir), "--options_file", str(training_options), "--batch_size", "4",
                         "--max_steps", "2"])
    bad = root / "bad"
    bad.mkdir()
    (bad / "empty.txt").write_text("")
    (bad / "not_json.json").write_text("{'lstm': ")
    (bad / "list.json").write_text("[1, 2]")
    (bad / "not_hdf5.hdf5").write_text("these are not weights\n")
    with open(weight_file, "rb") as f:
        (bad / "truncated.hdf5").write_bytes(f.read()[:2000])
    with h5py.File(bad / "other.hdf5", "w") as f:
        f["x"] = [1.0]
    (bad / "binary.txt").write_bytes(open(weight_file, "rb").read()[:4000])
    write_lines(bad, ["<S>", "</S>", "<UNK>", "alpha", "bravo", "alpha"], "duplicates.txt")
    write_lines(bad, ["alpha", "bravo", "<S>", "</S>", "<UNK>"], "specials_last.txt")
    write_lines(bad, ["<S>", "</S>", "<UNK>", *WORDS[::-1]], "reordered.txt")
    write_lines(bad, ["<S>", "</S>", "<UNK>", *WORDS, "extra"], "larger.txt")
    (bad / "a_directory").mkdir()
    damaged = root / "damaged_ckpt"
    shutil.copytree(save_dir, damaged)
    checkpoint = damaged / "checkpoint.npz"
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])
    return {"options": options_file, "weights": weight_file, "model": str(root / "model"), "text": corpus["heldout"],
            "train": corpus["train"], "vocab": corpus["vocab"], "training_options": str(training_options),
            "save_dir": str(save_dir), "damaged": str(damaged), "out": str(root / "out"),
            **{path.stem: str(path) for path in bad.iterdir()}}


TRAIN = ["--train_prefix", "{train}", "--vocab_file", "{vocab}", "--save_dir", "{out}/ckpt"]


def _train_on(train="{train}", vocab="{vocab}"):
    """train_elmo.py's arguments with a tiny options file, and the given shards and vocabulary."""
    return ["--train_prefix", train, "--vocab_file", vocab, "--save_dir", "{out}/ckpt",
            "--options_file", "{training_options}"]


ELMO = ["{text}", "{out}/embeddings.hdf5"]
CASES = [
    # (script, arguments, what the line must name, exit status)
    ("build_vocab", ["--train_prefix", "{out}/nothing*", "--vocab_file", "{out}/v.txt"], "nothing*", 1),
    ("build_vocab", ["--train_prefix", "{empty}", "--vocab_file", "{out}/v.txt"], "empty.txt", 1),
    ("build_vocab", ["--train_prefix", "{train}", "--vocab_file", "{a_directory}"], "a_directory", 1),
    ("build_vocab", ["--train_prefix", "{train}", "--vocab_file", "{out}/v.txt", "--min_count", "0"], "--min_count",
     2),
    ("build_vocab", ["--train_prefix", "{train}", "--vocab_file", "{out}/v.txt", "--max_size", "2"], "max_size", 1),
    ("build_vocab", ["--train_prefix", "{train}", "--vocab_file", "{out}/v.txt", "--max_size", "x"], "--max_size", 2),
    ("train_elmo", TRAIN + ["--options_file", "{out}/missing.json"], "missing.json", 1),
    ("train_elmo", TRAIN + ["--options_file", "{not_json}"], "not_json.json", 1),
    ("train_elmo", TRAIN + ["--options_file", "{list}"], "list.json", 1),
    ("train_elmo", TRAIN + ["--options_file", "{empty}"], "empty.txt", 1),
    ("train_elmo", TRAIN + ["--options_file", "{weights}"], "weights.hdf5", 1),
    ("train_elmo", TRAIN + ["--size", "small", "--batch_size", "0"], "--batch_size", 2),
    ("train_elmo", TRAIN + ["--size", "large"], "--size", 2),
    ("train_elmo", TRAIN, "--options_file", 1),
    ("train_elmo", _train_on(vocab="{out}/missing.txt"), "missing.txt", 1),
    ("train_elmo", _train_on(vocab="{empty}"), "empty.txt", 1),
    ("train_elmo", _train_on(vocab="{binary}"), "binary.txt", 1),
    ("train_elmo", _train_on(vocab="{duplicates}"), "duplicates.txt", 1),
    ("train_elmo", _train_on(vocab="{specials_last}"), "specials_last.txt", 1),
    ("train_elmo", _train_on(train="{a_directory}"), "a_directory/*", 1),
    ("train_elmo", _train_on(train="{empty}"), "empty.txt", 1),
    ("train_elmo", TRAIN + ["--init_from", "{out}/no_model"], "no_model", 1),
    ("train_elmo", TRAIN + ["--init_from", "{truncated}"], "truncated.hdf5", 1),
    ("train_elmo", TRAIN + ["--init_from", "{text}"], "heldout.txt", 1),
    ("train_elmo", ["--train_prefix", "{train}", "--vocab_file", "{vocab}", "--save_dir", "{save_dir}",
                    "--options_file", "{training_options}"], "already holds a run's checkpoint", 1),
    ("restart", ["--train_prefix", "{train}", "--vocab_file", "{vocab}", "--save_dir", "{out}/none"], "none", 1),
    ("restart", ["--train_prefix", "{train}", "--vocab_file", "{vocab}", "--save_dir", "{damaged}"],
     "damaged_ckpt/checkpoint.npz is not a readable checkpoint", 1),
    ("restart", ["--train_prefix", "{train}", "--vocab_file", "{reordered}", "--save_dir", "{save_dir}"],
     "reordered.txt is not the vocabulary", 1),
    ("restart", ["--train_prefix", "{train}", "--vocab_file", "{larger}", "--save_dir", "{save_dir}"], "larger.txt",
     1),
    ("run_test", ["--test_prefix", "{text}", "--vocab_file", "{larger}", "--save_dir", "{save_dir}"], "larger.txt", 1),
    ("run_test", ["--test_prefix", "{text}", "--vocab_file", "{reordered}", "--save_dir", "{save_dir}"],
     "reordered.txt", 1),
    ("run_test", ["--test_prefix", "{text}", "--vocab_file", "{vocab}", "--save_dir", "{damaged}"], "damaged_ckpt", 1),
    ("run_test", ["--test_prefix", "{out}/nothing*", "--vocab_file", "{vocab}", "--save_dir", "{save_dir}"],
     "nothing*", 1),
    ("run_test", ["--test_prefix", "{text}", "--vocab_file", "{vocab}", "--save_dir", "{save_dir}", "--start",
                  "hot"], "--start", 2),
    ("dump_weights", ["--save_dir", "{out}/none", "--outfile", "{out}/w.hdf5"], "none", 1),
    ("dump_weights", ["--save_dir", "{damaged}", "--outfile", "{out}/w.hdf5"], "damaged_ckpt", 1),
    ("dump_weights", ["--save_dir", "{save_dir}", "--outfile", "{a_directory}"], "a_directory", 1),
    ("dump_weights", ["--save_dir", "{save_dir}", "--outfile", "{out}/w.hdf5", "--options_outfile", "{list}"],
     "list.json", 1),
    ("dump_weights", ["--save_dir", "{save_dir}", "--outfile", "{other}"], "other.hdf5", 1),
    ("elmo", ["{out}/missing.txt", "{out}/e.hdf5", "--model", "{model}"], "missing.txt", 1),
    ("elmo", ELMO + ["--options_file", "{not_json}", "--weight_file", "{weights}"], "not_json.json", 1),
    ("elmo", ELMO + ["--options_file", "{options}", "--weight_file", "{truncated}"], "truncated.hdf5", 1),
    ("elmo", ELMO + ["--options_file", "{options}", "--weight_file", "{not_hdf5}"], "not_hdf5.hdf5", 1),
    ("elmo", ELMO + ["--options_file", "{options}", "--weight_file", "{other}"], "other.hdf5", 1),
    ("elmo", ELMO + ["--model", "{out}/no_model"], "no_model", 1),
    ("elmo", ELMO + ["--model", "{model}", "--batch_size", "0"], "--batch_size", 2),
    ("elmo", ELMO + ["--model", "{model}", "--warm_up", "{empty}"], "empty.txt", 1),
    ("elmo", ["{a_directory}", "{out}/e.hdf5", "--model", "{model}"], "a_directory", 1),
    ("dump_bilm_embeddings", ["--dataset_file", "{text}", "--options_file", "{options}", "--weight_file",
                              "{truncated}", "--outfile", "{out}/d.hdf5"], "truncated.hdf5", 1),
    ("dump_bilm_embeddings", ["--dataset_file", "{text}", "--model", "{model}", "--outfile", "{out}/d.hdf5",
                              "--vocab_file", "{a_directory}"], "a_directory", 1),
    ("dump_token_embeddings", ["--vocab_file", "{out}/missing.txt", "--options_file", "{options}", "--weight_file",
                               "{weights}", "--outfile", "{out}/t.hdf5"], "missing.txt", 1),
    ("dump_token_embeddings", ["--vocab_file", "{vocab}", "--options_file", "{options}", "--weight_file",
                               "{not_hdf5}", "--outfile", "{out}/t.hdf5"], "not_hdf5.hdf5", 1),
    ("dump_token_embeddings", ["--vocab_file", "{vocab}", "--options_file", "{options}", "--weight_file",
                               "{weights}", "--outfile", "{out}/t.hdf5", "--batch_size", "0"], "--batch_size", 2),
    ("quickstart", ["--directory", "{empty}"], "empty.txt", 1),
    ("quickstart", ["--n_epochs", "0", "--directory", "{out}/q"], "--n_epochs", 2),
]


@pytest.mark.parametrize("script, args, named, status", CASES,
                         ids=[f"{script}-{i}" for i, (script, *_) in enumerate(CASES)])
def test_a_mistake_is_one_error_line_naming_it(files, capsys, script, args, named, status):
    argv = [arg.format(**files) for arg in args]
    with pytest.raises(SystemExit) as stop:
        _main(script)(argv)
    code = stop.value.code
    err = capsys.readouterr().err
    message = code if isinstance(code, str) else err.strip().splitlines()[-1] if err.strip() else ""
    assert (1 if isinstance(code, str) else code) == status, message
    assert message.startswith("Error: ") and "\n" not in message, message
    assert named in message, message
    assert "Traceback" not in err




@pytest.mark.slow
@pytest.mark.parametrize("argv, status", [
    (["bin/run_test.py", "--test_prefix", "{text}", "--vocab_file", "{larger}", "--save_dir", "{save_dir}"], 1),
    (["bin/train_elmo.py", "--train_prefix", "{train}", "--vocab_file", "{vocab}", "--save_dir", "{out}/x",
      "--batch_size", "many"], 2),
])
def test_the_shell_sees_the_status_and_one_line(files, argv, status):
    result = warm_python.run([sys.executable, *[arg.format(**files) for arg in argv]], cwd=ROOT, capture_output=True,
                             text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == status
    # Besides TensorFlow's own log lines, the script's first line says where it runs.
    lines = [line for line in result.stderr.strip().splitlines()
             if not line.startswith(("WARNING", "I0000", "E0000", "bilm: running on "))]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in result.stderr, result.stderr


EMBED_RUNNER = """
import runpy, sys, time
import bilm.io.formats.embedding_files as files

batches = files.length_sorted_batches


def slow_batches(*args, **kwargs):
    for n, batch in enumerate(batches(*args, **kwargs), start=1):
        yield batch
        print(f"BATCH {n}", flush=True)
        time.sleep(0.3)


files.length_sorted_batches = slow_batches
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_sigterm_stops_elmo_py_with_what_it_wrote_kept_for_the_rerun(files, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("".join(f"{' '.join(WORDS[i:i + 3 + i % 4])}\n" for i in range(16)))
    out = tmp_path / "out.hdf5"
    argv = ["bin/elmo.py", str(text), str(out), "--model", files["model"], "--batch_size", "2"]
    runner = tmp_path / "runner.py"
    runner.write_text(EMBED_RUNNER)
    env = dict(os.environ)
    process = warm_python.Popen([sys.executable, str(runner), *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stdout:
            if line.strip() == "BATCH 3":
                process.send_signal(signal.SIGTERM)
                break
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == "Stopped by SIGTERM."
    assert not out.exists()
    with h5py.File(str(out) + ".partial", "r") as partial:
        assert 6 <= len([key for key in partial if key.isdigit()]) < 16
    _main("elmo")(argv[1:])
    straight = tmp_path / "straight.hdf5"
    _main("elmo")([str(text), str(straight), "--model", files["model"]])
    with h5py.File(out, "r") as resumed, h5py.File(straight, "r") as expected:
        assert sorted(resumed) == sorted(expected)
        for key in expected:
            if key.isdigit():
                np.testing.assert_allclose(resumed[key][...], expected[key][...], atol=1e-5)
            else:
                assert resumed[key][()] == expected[key][()]
