"""Adapting a published model on JAX (`train_from_files(init_from=...)`, `bin/train_elmo.py --init_from`
with `KERAS_BACKEND=jax`), in processes without TensorFlow: the run starts from the weight file's biLM with the
softmax TensorFlow's `initialize_softmax` fits, refuses what TensorFlow's path refuses, learns, and restarts
from its checkpoint alone.

The "published" model is a tiny random biLM (the architecture of `tiny_options`, its training keys in its
options as the NLPL repository's models have them); the new text is the cycle corpus of `training_helpers`.
"""
import json

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from backend_processes import json_result, run_on_backend
from bilm.training.config.settings import training_settings
from bilm.training.model.adaptation import adaptation_options, load_model_weights, open_model_to_adapt
from tensorflow_reference.softmax_init import initialize_softmax
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import open_data, tiny_options, write_corpus

# Training keys of the adapted runs (the architecture is the model's).
SETTINGS = {"batch_size": 8, "unroll_steps": 5, "n_negative_samples_batch": 8, "dropout": 0.1,
            "learning_rate": 0.3}

START = '''
import json, sys
import keras
import numpy as np
from bilm.errors import UserError
from bilm.io.formats.weight_file import weight_table
from bilm.training.config.settings import training_settings
from bilm.training.data.lm_dataset import load_training_data
from bilm.training import train_from_files
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.arrays.training_run import adapted_state
from bilm.training.model.adaptation import adaptation_options, open_model_to_adapt

folder, model_dir = sys.argv[1], sys.argv[2]
corpus = json.load(open(folder + "/corpus.json"))
report = {"errors": {}}
for case, extra in (("restart", {"restart": True}), ("size", {"size": "small"}),
                    ("softmax_init", {"softmax_init": "fitted", "options_file": folder + "/settings.json"})):
    try:
        train_from_files(corpus["train"], corpus["vocab"], folder + "/refused", init_from=model_dir, verbose=0,
                         **extra)
    except UserError as error:
        report["errors"][case] = str(error)
# What train_from_files starts an adapted run on JAX from: the adapted options, the data, the start.
model = open_model_to_adapt(model_dir)
options = adaptation_options(model, folder + "/settings.json").updated(n_tokens_vocab=corpus["n_vocab"],
                                                                       n_train_tokens=1000)
data, _ = load_training_data(options, corpus["train"], corpus["vocab"], seed=0)
step = ArrayTrainStep(options, training_settings(options.raw)[1])
arrays = {}
for method in ("fit", "encoding"):
    state, _ = adapted_state(step, step.initial_state(), model, data, method)
    arrays.update({f"{method}/softmax/{key}": keras.ops.convert_to_numpy(value)
                   for key, value in state["softmax"].items()})
    step.write_weights(state)
    arrays.update({f"{method}/file/{entry.name}": entry.get() for entry in weight_table(step.network)})
np.savez(folder + f"/started_{keras.backend.backend()}.npz", **arrays)
report["tensorflow_imported"] = "tensorflow" in sys.modules
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The published model's folder, the new text and the adapted runs' training keys, in one folder."""
    folder = tmp_path_factory.mktemp("jax_adaptation")
    model = folder / "published"
    model.mkdir()
    options = tiny_options(batch_size=32, n_epochs=10)  # training keys the adapted runs must not take
    options["char_cnn"]["n_characters"] = 262  # as published: prediction's padding row counted
    (model / "options.json").write_text(json.dumps(options))
    # Smaller than the default scale (0.5), whose LSTMs are chaotic: the backends' round-off would grow over
    # the windows of the text until their outputs differ, as a trained model's do not.
    R.write_random_weights(str(model / "weights.hdf5"), options, seed=3, scale=0.25)
    corpus = write_corpus(folder, n_train=200, n_heldout=30, seed=4)
    (folder / "corpus.json").write_text(json.dumps(corpus))
    (folder / "settings.json").write_text(json.dumps(SETTINGS))
    return folder, model, corpus


def _tensorflow_softmax(model_dir, corpus, method):
    """`(W, b)` of TensorFlow's `initialize_softmax` for the run of START (same options, text and seed)."""
    model = open_model_to_adapt(str(model_dir))
    options = adaptation_options(model, SETTINGS).updated(n_tokens_vocab=corpus["n_vocab"], n_train_tokens=1000)
    options, settings = training_settings(options)
    lm = TrainingLM(options, settings)
    load_model_weights(lm, model)
    initialize_softmax(lm, open_data(options, corpus), method)
    return lm.softmax_weights.numpy(), lm.softmax_bias.numpy()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_an_adapted_run_starts_from_the_files_weights_and_tensorflows_softmax(files, backend):
    folder, model_dir, corpus = files
    report = json_result(run_on_backend(backend, START, folder, model_dir))
    assert not report["tensorflow_imported"]
    errors = report["errors"]
    assert errors["restart"].startswith("--init_from starts a new run from a model; a restart continues")
    assert errors["size"].startswith("Give either a model to adapt (--init_from)")
    assert "softmax_init must be one of" in errors["softmax_init"]
    assert not (folder / "refused").exists()

    weights = R.read_weights(model_dir / "weights.hdf5")
    with np.load(folder / f"started_{backend}.npz") as started:
        started = dict(started)
    for method in ("fit", "encoding"):
        loaded = {name[len(f"{method}/file/"):]: value for name, value in started.items()
                  if name.startswith(f"{method}/file/")}
        assert sorted(loaded) == sorted(weights)
        for name, value in weights.items():
            np.testing.assert_array_equal(loaded[name], value, err_msg=name)
        tf.keras.utils.set_random_seed(0)
        want_weights, want_bias = _tensorflow_softmax(model_dir, corpus, method)
        got_weights, got_bias = started[f"{method}/softmax/W"], started[f"{method}/softmax/b"]
        assert got_weights.shape == (corpus["n_vocab"], 8) and np.abs(want_weights).max() > 1e-3
        np.testing.assert_allclose(got_weights, want_weights, rtol=1e-4, atol=1e-4 * np.abs(want_weights).max(),
                                   err_msg=method)
        np.testing.assert_allclose(got_bias, want_bias, rtol=1e-4, atol=1e-4 * max(np.abs(want_bias).max(), 1e-3),
                                   err_msg=method)


SCRIPTS = '''
import json, os, runpy, sys
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.arrays.evaluation import heldout_perplexity
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.arrays.training_run import adapted_state
from bilm.training.model.adaptation import open_model_to_adapt

folder, model, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
corpus = json.load(open(folder + "/corpus.json"))
train, restart = (runpy.run_path(f"bin/{name}.py")["main"] for name in ("train_elmo", "restart"))
common = ["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"], "--save_dir", folder + "/run",
          "--batch_size", "8", "--unroll_steps", "5", "--n_negative_samples_batch", "8", "--learning_rate", "0.3"]
stopped = train(common + ["--init_from", model, "--softmax_init", "encoding", "--max_steps", str(steps // 3)])
# The held-out perplexity the run started from.
options = load_options(folder + "/run/options.json")
step = ArrayTrainStep(options, training_settings(options.raw)[1])
data, _ = load_training_data(options, corpus["train"], corpus["vocab"], seed=0)
state, _ = adapted_state(step, step.initial_state(), open_model_to_adapt(model), data, "encoding")
heldout, _ = load_training_data(options, corpus["heldout"], corpus["vocab"], test=True)
start = heldout_perplexity(step, state, heldout)
os.rename(model, model + "_gone")  # the checkpoint holds the adapted start: the restart needs no model
try:
    restarted = restart(common + ["--max_steps", str(steps), "--heldout_prefix", corpus["heldout"]])
finally:
    os.rename(model + "_gone", model)
print(json.dumps({"start": start, "restarted": restarted["heldout_perplexity"],
                  "steps": [stopped["step"], restarted["step"]], "tensorflow_imported": "tensorflow" in sys.modules}))
'''


@pytest.mark.slow
def test_the_script_adapts_on_jax_learns_and_restarts(files):
    folder, model_dir, corpus = files
    steps = 30
    result = run_on_backend("jax", SCRIPTS, folder, model_dir, steps, environment={"BILM_COMMAND": "1"})
    report = json_result(result)
    assert not report["tensorflow_imported"]
    assert "Adapting " in result.stdout and "softmax_init='encoding'" in result.stdout
    assert result.stdout.count("Adapting ") == 1  # the restart starts from the checkpoint
    assert report["steps"] == [steps // 3, steps]
    assert report["restarted"] < report["start"], report
    saved = json.loads((folder / "run" / "options.json").read_text())
    assert saved["batch_size"] == 8 and saved["n_tokens_vocab"] == corpus["n_vocab"] and "n_epochs" not in saved
    assert saved["lstm"]["dim"] == 16 and saved["char_cnn"]["n_characters"] == 261  # the model's, training form
