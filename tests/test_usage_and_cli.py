"""The usage examples and the dump commands run end to end as a user runs them."""
import json
import os
import re
import sys

import h5py
import keras
import pytest

import warm_python
from backend_processes import run_on_backend
from bilm.training import quickstart
from bilm.training.quickstart import MARKER, QuickstartDirectory, prepare_directory, run_quickstart
from helpers import ROOT, SENTENCES, write_model, write_vocab
from training_helpers import tiny_options


def _run(args, env=None, **kwargs):
    env = dict(os.environ, **(env or {}))
    result = warm_python.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300, **kwargs)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.parametrize("script, expected", [
    ("usage/usage_character.py", "ELMo question (batch, time, 2P): (1, 6, 32)"),
    ("usage/usage_token.py", "ELMo context (batch, time, 2P): (2, 11, 32)"),
    ("usage/usage_cached.py", "sentence 2: cached (3, 6, 32) -> ELMo (1, 6, 32)"),
])
@pytest.mark.slow
def test_usage_examples_run(script, expected, tmp_path):
    # The example's temporary files are gone when it ends.
    assert expected in _run([script], env={"TMPDIR": str(tmp_path)})
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_dump_commands(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    vocab_file = write_vocab(tmp_path, ["The", "cat"])
    dataset_file = tmp_path / "data.txt"
    dataset_file.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n", encoding="utf-8")
    out = _run(["bin/dump_token_embeddings.py", "--vocab_file", vocab_file, "--options_file", options_file,
                "--weight_file", weight_file, "--outfile", str(tmp_path / "tokens.hdf5")])
    assert out.splitlines()[-1] == f"Wrote the embeddings of 5 tokens, shape (5, 6), to {tmp_path / 'tokens.hdf5'}."
    out = _run(["bin/dump_bilm_embeddings.py", "--vocab_file", vocab_file, "--dataset_file",
                str(dataset_file), "--options_file", options_file, "--weight_file", weight_file,
                "--outfile", str(tmp_path / "new_dir" / "elmo.hdf5"), "--batch_size", "2"])
    assert out.splitlines()[-1] == f"Wrote 5 sentence datasets to {tmp_path / 'new_dir' / 'elmo.hdf5'} in this run."
    with h5py.File(tmp_path / "tokens.hdf5", "r") as f:
        assert f["embedding"].shape == (5, 6)
    with h5py.File(tmp_path / "new_dir" / "elmo.hdf5", "r") as f:
        assert [f[str(i)].shape for i in range(len(SENTENCES))] == [
            (3, len(s), 12) for s in SENTENCES]


def _recorded(results, function, args, kwargs):
    """`function(*args, **kwargs)`, its result appended to `results`."""
    results.append(function(*args, **kwargs))
    return results[-1]


def _figures_masked(out):
    """`out`'s lines with every figure (and its unit; a duration of minutes, `m:ss`, is one figure) and every path
    of a backend's own run replaced, without the progress line's updates between its first and its last (printed
    by the clock: a slower backend prints more of them)."""
    return [re.sub(r"[0-9][0-9,.]*(:[0-9]+)*(ms|us|s)?", "#", re.sub("qs_(jax|torch)", "qs_tensorflow", line))
            for line in out.splitlines() if " left - " not in line]


@pytest.mark.slow
def test_quickstart_trains_evaluates_dumps_and_embeds_alike_on_every_backend_and_reruns_in_its_directory(
        tmp_path, monkeypatch):
    outputs, perplexities = {}, {}
    for backend in ("tensorflow", "jax", "torch"):
        out = outputs[backend] = _run(["bin/quickstart.py", "--directory", str(tmp_path / f"qs_{backend}"),
                                       "--n_epochs", "1"], env={"KERAS_BACKEND": backend})
        line = next(l for l in out.splitlines() if l.startswith("held-out perplexity"))
        perplexity, unigram = float(line.split()[2]), float(line.split()[-1].rstrip(")"))
        perplexities[backend] = perplexity
        assert perplexity < 0.9 * unigram, (backend, line)
        # The closing evaluation is the one training did at its end.
        assert f"Epoch 1: held-out perplexity {perplexity:.3f}" in out, backend
        # Each sentence on its own: from the boundary state it keeps what the
        # carried state gives (within a few percent); from zeros it loses.
        line = next(l for l in out.splitlines() if l.startswith("with every sentence on its own"))
        zeros, warm = float(line.split()[-6].rstrip(",")), float(line.split()[-1])
        assert warm < zeros and abs(warm / perplexity - 1) < 0.05, (backend, perplexity, zeros, warm)
        directory = tmp_path / f"qs_{backend}"
        assert (directory / "weights.hdf5").exists() and (directory / "weights_options.json").exists()
        assert "(2, 3, 8, 32)" in out and "Starting over in" not in out
        assert ".tmp" not in out, out  # no path that is gone when the run ends
    # One trainer: the same lines on every backend, apart from the figures.
    assert _figures_masked(outputs["jax"]) == _figures_masked(outputs["tensorflow"])
    assert _figures_masked(outputs["torch"]) == _figures_masked(outputs["tensorflow"])
    # The directory is the quick start's own: a second run may start over there, and telling so deletes nothing.
    assert prepare_directory(str(tmp_path / "qs_jax")) is True
    assert (tmp_path / "qs_jax" / "checkpoint").is_dir() and (tmp_path / "qs_jax" / "corpus").is_dir()

    # A second run in the directory of this process's backend (its checks, with training stood in for:
    # tests/training/test_quickstart.py) replaces the first run's files with its own, as good.
    backend = keras.backend.backend()
    directory = tmp_path / f"qs_{backend}"
    trained, evaluated = [], []
    train, evaluate = quickstart.train_from_files, quickstart.evaluate_from_files
    monkeypatch.setattr(quickstart, "train_from_files", lambda *args, **kwargs: _recorded(trained, train, args, kwargs))
    monkeypatch.setattr(quickstart, "evaluate_from_files",
                        lambda *args, **kwargs: _recorded(evaluated, evaluate, args, kwargs))
    second = run_quickstart(str(directory), n_epochs=1, verbose=0)
    assert second["heldout_perplexity"] == pytest.approx(perplexities[backend], rel=1e-4)
    # The closing figure is training's own, and the checkpoint is read once for both fixed starts.
    assert second["heldout_perplexity"] == trained[0]["heldout_perplexity"]
    assert len(evaluated) == 1 and evaluated[0] == {"zeros": second["zeros_start_perplexity"],
                                                    "warm": second["warm_start_perplexity"]}
    assert second["lm_embeddings_shape"] == (2, 3, 8, 32)
    assert sorted(os.listdir(directory)) == sorted([MARKER, "checkpoint", "corpus", "train_options.json",
                                                    "weights.hdf5", "weights_options.json"])
    recorded = QuickstartDirectory(str(directory)).files
    assert "weights.hdf5" in recorded and "corpus/vocab.txt" in recorded
    assert "checkpoint/checkpoint.npz" in recorded


@pytest.mark.slow
def test_downstream_example_elmo_beats_context_free_embeddings(tmp_path):
    # 4 epochs, not the example's 15: ELMo's lead is clear by then, and the test takes a quarter of the time.
    out = _run(["usage/usage_downstream.py", "--epochs", "4"], env={"TMPDIR": str(tmp_path)})
    assert os.listdir(tmp_path) == []
    scores = {line.split(",")[1].split(":")[0].strip(): float(line.split()[-1])
              for line in out.splitlines() if line.startswith("held-out token accuracy")}
    elmo = scores["ELMo (all layers mixed)"]
    assert elmo > scores["word_emb only (layer 0)"] + 0.1 and elmo > scores["majority tag"] + 0.1, scores


@pytest.mark.parametrize("script, what", [
    ("quickstart", "The quick start (bin/quickstart.py)"),
    pytest.param("train_elmo", "Training (bin/train_elmo.py)", marks=pytest.mark.slow),
    pytest.param("restart", "Continuing a run (bin/restart.py)", marks=pytest.mark.slow),
    pytest.param("run_test", "Evaluating a checkpoint (bin/run_test.py)", marks=pytest.mark.slow),
])
def test_the_training_scripts_on_a_backend_without_training_say_so_in_one_line(tmp_path, script, what):
    # Keras's NumPy backend runs models but computes no gradients.
    env = dict(os.environ, KERAS_BACKEND="numpy")
    flags = ["--train_prefix", "x", "--vocab_file", "v", "--save_dir", str(tmp_path / "qs")]
    flags = {"quickstart": ["--directory", str(tmp_path / "qs")], "run_test": ["--test_prefix", "x", "--vocab_file",
             "v", "--save_dir", str(tmp_path / "qs")]}.get(script, flags)
    result = warm_python.run([sys.executable, f"bin/{script}.py", *flags], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"Error: {what} runs on TensorFlow, JAX or PyTorch, where bilm trains, and Keras runs on numpy "
        "(KERAS_BACKEND=numpy). Set KERAS_BACKEND to tensorflow, jax or torch for it."], result.stderr[-2000:]
    assert not (tmp_path / "qs").exists()


@pytest.mark.slow
def test_training_from_python_on_a_backend_without_training_says_so_in_one_error(tmp_path):
    code = ("import json, sys\nimport bilm.training\n"
            "bilm.training.train(json.loads(sys.argv[1]), None, 1, sys.argv[2], None)")
    options = tiny_options(n_tokens_vocab=23, n_train_tokens=100)
    result = run_on_backend("numpy", code, json.dumps(options), tmp_path / "run", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "bilm.errors.UserError: Training runs on TensorFlow, JAX or PyTorch, where bilm trains, and Keras runs on "
        "numpy (KERAS_BACKEND=numpy). Set KERAS_BACKEND to tensorflow, jax or torch for it."), result.stderr[-2000:]


@pytest.mark.parametrize("script", sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "bin"))
                                          if name.endswith(".py")))
def test_every_flag_of_every_script_says_what_it_is(script, monkeypatch):
    """Each script's parser, caught as it parses: every option and argument has help text."""
    import argparse
    import importlib.util

    class Parsed(Exception):
        pass

    parsers = []

    def capture(self, *args, **kwargs):
        parsers.append(self)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    spec = importlib.util.spec_from_file_location(f"bin_{script}", os.path.join(ROOT, "bin", f"{script}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Parsed):
        module.main([])
    silent = [action.option_strings or action.dest for action in parsers[0]._actions if not action.help]
    assert silent == []
