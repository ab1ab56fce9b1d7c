"""The held-out evaluation and the boundary state on JAX (`bilm.training.arrays.evaluation`,
`bilm.training.arrays.boundary_state_measure`): from the same weights and text they give what TensorFlow's
`evaluate_lm` and `measure_boundary_state` give; a JAX run stores its boundary state in its checkpoint and its
weight file (a signal during the measure keeps the one it had), an old checkpoint without one still loads
and gets one, and bin/run_test.py evaluates a JAX run."""
import json
import signal

import numpy as np
import pytest

from backend_processes import json_result, run_on_backend
from bilm.io.formats.weight_file import read_boundary_state
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.run import run_checkpoint as checkpoints
from bilm.training.run import run_directory
from bilm.utils.python_random import seeded_python_random
from tensorflow_reference.boundary_state_measure import measure_boundary_state
from tensorflow_reference.evaluation import evaluate_lm
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import open_data, tiny_options, write_corpus

STARTS = ("carry", "zeros", "warm")
# Sentences the boundary state is averaged over in these tests (the library's default is 1,000).
N_SENTENCES = 200
SEED = 0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jax_evaluation")
    return write_corpus(folder, n_train=400, n_heldout=60)


JAX_MEASURES = '''
import json, logging, sys
import jax
import numpy as np
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.arrays.boundary_state_measure import measure_boundary_state
from bilm.training.arrays.evaluation import evaluate_state
from bilm.training.arrays.train_step import ArrayTrainStep

# The programs JAX compiles (each in-memory compilation, whether or not its persistent cache holds it).
compiled = []
jax.config.update("jax_log_compiles", True)
logging.getLogger("jax").addHandler(type("Names", (logging.Handler,), {"emit": lambda self, record: compiled.append(
    record.getMessage().split()[1]) if record.getMessage().startswith("Compiling ") else None})())
folder, n_sentences = sys.argv[1], int(sys.argv[2])
corpus, options = json.load(open(folder + "/corpus.json")), json.load(open(folder + "/options.json"))
weights, tensorflow_boundary = np.load(folder + "/weights.npz"), np.load(folder + "/boundary.npz")
_, settings = training_settings(options)
step = ArrayTrainStep(load_options(options), settings, seed=0)
state = step.initial_state()
state["bilm"] = [weights[v.path] for v in step.network.trainable_variables]
state["non_trainable"] = [weights[v.path] for v in step.network.non_trainable_variables]
state["softmax"] = {"W": weights["softmax/W"], "b": weights["softmax/b"]}
train, _ = load_training_data(options, corpus["train"], corpus["vocab"])
heldout, _ = load_training_data(options, corpus["heldout"], corpus["vocab"], test=True)
boundary, n_starts = measure_boundary_state(step, state, train, n_sentences)
np.savez(folder + "/jax_boundary.npz", **boundary)
given = ({key: tensorflow_boundary[key] for key in tensorflow_boundary.files}, 1)
metrics = {start: evaluate_state(step, state, heldout, start=start, boundary_state=given)
           for start in ("carry", "zeros", "warm")}
print(json.dumps({"n_starts": n_starts, "metrics": metrics, "tensorflow_imported": "tensorflow" in sys.modules,
                  "losses_compiled": compiled.count("jit(losses)")}))
'''


@pytest.mark.slow
def test_evaluation_and_boundary_state_equal_tensorflows(tmp_path, corpus):
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"], dropout=0.1)
    _, settings = training_settings(options)
    with seeded_python_random(SEED):  # weights whose three starts give three perplexities (checked below)
        lm = TrainingLM(load_options(options), settings)
    weights = {v.path: v.numpy() for v in lm.network.weights}
    weights.update({"softmax/W": lm.softmax_weights.numpy(), "softmax/b": lm.softmax_bias.numpy()})
    np.savez(tmp_path / "weights.npz", **weights)
    n_starts = measure_boundary_state(lm, open_data(options, corpus), N_SENTENCES)
    want_boundary = {key: v.numpy() for key, v in lm.boundary_state.items()}
    np.savez(tmp_path / "boundary.npz", **want_boundary)
    want = {start: evaluate_lm(lm, open_data(options, corpus, test=True), settings.batch_size, start=start)
            for start in STARTS}
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "options.json").write_text(json.dumps(options))

    report = json_result(run_on_backend("jax", JAX_MEASURES, tmp_path, N_SENTENCES))
    assert not report["tensorflow_imported"]
    assert report["n_starts"] == n_starts
    with np.load(tmp_path / "jax_boundary.npz") as got:
        assert set(got.files) == set(want_boundary)
        for key, expected in want_boundary.items():
            np.testing.assert_allclose(got[key], expected, rtol=1e-5, atol=1e-6, err_msg=key)
    assert min(np.abs(v).max() for v in want_boundary.values()) > 1e-3  # states, not zeros
    for start in STARTS:
        got, expected = report["metrics"][start], want[start]
        assert got["batches"] == expected["batches"], start
        for key in ("perplexity", "forward_perplexity", "backward_perplexity"):
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, err_msg=f"{start}: {key}")
    # The starts differ, so each comparison above tells them apart.
    assert len({round(want[start]["perplexity"], 4) for start in STARTS}) == 3, want
    # Each evaluation compiles its batch's losses once: its first call's LSTM states are placed as the calls'
    # outputs, which feed the next (uncommitted zeros compiled it again).
    assert report["losses_compiled"] == len(STARTS), report["losses_compiled"]


JAX_RUNS = '''
import functools, json, os, shutil, signal, sys
import numpy as np
from bilm.training import dump_weights, evaluate_from_files, train as train_from
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.arrays import training_run
from bilm.training.run import run_checkpoint as checkpoints, run_directory
from bilm.training.run.stop_signals import TrainingInterrupted

folder, n_sentences = sys.argv[1], int(sys.argv[2])
corpus, options = json.load(open(folder + "/corpus.json")), json.load(open(folder + "/options.json"))
training_run.measure_boundary_state = functools.partial(training_run.measure_boundary_state,
                                                       n_sentences=n_sentences)
data, _ = load_training_data(options, corpus["train"], corpus["vocab"], seed=5)
heldout, _ = load_training_data(options, corpus["heldout"], corpus["vocab"], test=True)


def train(save_dir, max_steps, **kwargs):
    """Trains the run in `save_dir`, continuing its checkpoint if it has one."""
    restart = save_dir if os.path.isdir(save_dir) and run_directory.newest_meta(save_dir) else None
    return train_from(options, data, 1, save_dir, None, restart, seed=5, max_steps=max_steps, checkpoint_every=100,
                      save_on_signals=True, verbose=0, **kwargs)


def as_first_format(save_dir):
    """Rewrites the checkpoint in `save_dir` as JAX's first format wrote it: no boundary state, under the name
    JAX's runs gave it."""
    path = checkpoints.checkpoint_path(save_dir)
    with np.load(path) as f:
        arrays = {key: f[key] for key in f.files if not key.startswith("boundary_state/")}
    meta = json.loads(arrays.pop("__meta__").tobytes().decode())
    meta = {"format": "bilm-jax-checkpoint-1", **{key: meta[key] for key in ("step", "seed", "options")}}
    np.savez(os.path.join(save_dir, "jax_checkpoint.npz"), __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             **arrays)
    os.remove(path)


report = {"heldout_perplexity": train(folder + "/whole", 4, heldout_data=heldout)["heldout_perplexity"]}
dump_weights(folder + "/whole", folder + "/whole/weights.hdf5")
report["evaluated"] = {start: evaluate_from_files(corpus["heldout"], corpus["vocab"], folder + "/whole", verbose=0,
                                                  start=start) for start in ("carry", "warm")}
os.makedirs(folder + "/old")
shutil.copy(checkpoints.checkpoint_path(folder + "/whole"), checkpoints.checkpoint_path(folder + "/old"))
shutil.copy(folder + "/whole/options.json", folder + "/old/options.json")
as_first_format(folder + "/old")
report["old_boundary_state"] = run_directory.read_boundary_state(folder + "/old")
measure = training_run.measure_boundary_state


def signalled(*args, **kwargs):
    """The measure, with a SIGTERM arriving as it starts."""
    os.kill(os.getpid(), signal.SIGTERM)
    return measure(*args, **kwargs)


training_run.measure_boundary_state = signalled
try:
    train(folder + "/old", 0)  # max_steps is the call's: no step, the boundary state measured
except TrainingInterrupted as stopped:
    report["interrupted"] = [stopped.step, stopped.exit_status, stopped.phase]
training_run.measure_boundary_state = measure
report["interrupted_kept_a_boundary_state"] = run_directory.read_boundary_state(folder + "/old") is not None
report["old_restarted"] = train(folder + "/old", 0)["step"]
initial_state = training_run.ArrayTrainStep.initial_state


def interrupted_start(self, *args, **kwargs):
    """A new run's first state, during whose making SIGINT arrives."""
    os.kill(os.getpid(), signal.SIGINT)
    return initial_state(self, *args, **kwargs)


training_run.ArrayTrainStep.initial_state = interrupted_start
try:
    train(folder + "/started", 1)
except TrainingInterrupted as stopped:
    report["start_interrupted"] = [stopped.step, stopped.exit_status, stopped.phase, stopped.checkpoint,
                                   sorted(os.listdir(folder + "/started"))]
training_run.ArrayTrainStep.initial_state = initial_state
report["tensorflow_imported"] = "tensorflow" in sys.modules
print(json.dumps(report))
'''

SCRIPT = '''
import runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def _arrays(save_dir):
    with np.load(save_dir / checkpoints.CHECKPOINT_FILE) as f:
        return {key: f[key] for key in f.files if key != "__meta__"}


@pytest.mark.slow
def test_a_jax_run_stores_its_boundary_state_and_run_test_evaluates_it(tmp_path, corpus):
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"])
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "options.json").write_text(json.dumps(options))
    report = json_result(run_on_backend("jax", JAX_RUNS, tmp_path, N_SENTENCES))
    assert not report["tensorflow_imported"]

    # The run's end measured the boundary state; the weight file holds the checkpoint's.
    stored, n_starts = run_directory.read_boundary_state(tmp_path / "whole")
    assert n_starts == checkpoints.read_meta(tmp_path / "whole")["n_boundary_starts"] > N_SENTENCES // 2
    assert set(stored) == {"forward_0_c", "forward_0_h", "forward_1_c", "forward_1_h", "backward_0_c",
                           "backward_0_h", "backward_1_c", "backward_1_h"}
    written, written_starts = read_boundary_state(tmp_path / "whole" / "weights.hdf5")
    assert written_starts == n_starts and set(written) == set(stored)
    for key, value in stored.items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
        assert np.abs(value).max() > 1e-3, key

    # The run's checkpoint in the first format (no boundary state) loads, and continuing it (no step left to
    # take) measures the boundary state the run measured: the whole checkpoint comes back. A signal during
    # that measure waits for it (JAX's calls are never interrupted half-way), then stops the run, the measured
    # state saved.
    assert report["old_boundary_state"] is None and report["old_restarted"] == 4
    assert report["interrupted"] == [4, 128 + signal.SIGTERM, "measuring the boundary state"]
    assert report["interrupted_kept_a_boundary_state"]
    # SIGINT while a new run's start is prepared: nothing kept, not even options.json (the same call starts over).
    assert report["start_interrupted"][:4] == [0, 128 + signal.SIGINT, "starting", None]
    assert "options.json" not in report["start_interrupted"][4]
    want, got = _arrays(tmp_path / "whole"), _arrays(tmp_path / "old")
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)

    # What the run printed is bin/run_test.py's figure (its default start and rows); the script on JAX prints
    # the library's.
    assert report["evaluated"]["carry"] == pytest.approx(report["heldout_perplexity"], rel=1e-6)
    assert report["evaluated"]["warm"] != pytest.approx(report["evaluated"]["carry"], rel=1e-4)
    script = run_on_backend("jax", SCRIPT, "bin/run_test.py", "--test_prefix", corpus["heldout"], "--vocab_file",
                            corpus["vocab"], "--save_dir", tmp_path / "whole", "--start", "warm",
                            environment={"BILM_COMMAND": "1"})
    last = script.stdout.strip().splitlines()[-1]
    assert last == f"AVERAGE PERPLEXITY = {report['evaluated']['warm']:.4f}", script.stdout
