"""Training on JAX (`bilm.training.train`, the array trainer `bilm.training.arrays.training_run`), in processes
without TensorFlow: it learns (held-out perplexity far below the unigram's, as TensorFlow's training in
test_loop.py), restarts exactly after a stop or a signal, and dumps weights that TensorFlow's bilm and the NumPy
reference embed alike."""
import json
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from backend_processes import backend_environment, json_result, run_on_backend
from bilm import BidirectionalLanguageModel
from helpers import ROOT, SENTENCES
from training_helpers import as_tensorflow_checkpoints, tiny_options, unigram_perplexity, write_corpus

TRAIN = '''
import functools, json, os, signal, sys
import numpy as np
from bilm.training import dump_weights, train
from bilm.training.arrays import training_run
from bilm.training.run.run_directory import newest_meta
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.run.stop_signals import TrainingInterrupted

# Runs in turn, in this one process: [save_dir, the max_steps of each call (each continuing the last), the
# batch (counted from the run's start) at which the stream sends this process SIGTERM, or None].
folder, runs = sys.argv[1], json.loads(sys.argv[2])
corpus = json.load(open(folder + "/corpus.json"))
# The boundary state at each run's end on 200 sentences, as TensorFlow's training tests measure it
# (tests/training/conftest.py); tests/training/arrays/test_jax_evaluation.py tests the measure.
training_run.measure_boundary_state = functools.partial(training_run.measure_boundary_state, n_sentences=200)
options = json.load(open(folder + "/options.json"))
data, _ = load_training_data(options, corpus["train"], corpus["vocab"], seed=5)
heldout, _ = load_training_data(options, corpus["heldout"], corpus["vocab"], test=True)


class Signalling:
    """The stream, sending this process SIGTERM as it gives batch `signal_at`."""
    def __init__(self, signal_at):
        self.signal_at = signal_at
        self.forward = data.forward  # the same data as `data`'s (its file pattern), for a restart

    def iter_batches(self, *args, skip=0):
        for n, batch in enumerate(data.iter_batches(*args, skip=skip), start=skip):
            if n == self.signal_at:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch


reports = []
for save_dir, calls, signal_at in runs:
    report = {"steps_of_each_call": []}
    try:
        for max_steps in calls:
            result = train(options, Signalling(signal_at) if signal_at is not None else data, 1, save_dir, None,
                           restart_ckpt_file=save_dir if newest_meta(save_dir) else None, seed=5,
                           max_steps=max_steps, checkpoint_every=4, heldout_data=heldout, save_on_signals=True,
                           verbose=0)
            report["steps_of_each_call"].append(result["step"])
        report.update(result)
        report.update(dump_weights(save_dir, save_dir + "/weights.hdf5"))
    except TrainingInterrupted as stopped:
        report.update(interrupted=True, step=stopped.step, exit_status=stopped.exit_status)
    reports.append(report)
print(json.dumps({"runs": reports, "tensorflow_imported": "tensorflow" in sys.modules}))
'''


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jax_training")
    corpus = write_corpus(folder)
    (folder / "corpus.json").write_text(json.dumps(corpus))
    return folder, corpus


def _train(folder, options, *runs, backend="jax"):
    """The reports of `runs` (`(save_dir, [max_steps of each call], signal_at or None)`), trained in turn in
    one process on `backend` (JAX or PyTorch) without TensorFlow."""
    (folder / "options.json").write_text(json.dumps(options))
    report = json_result(run_on_backend(backend, TRAIN, folder, json.dumps([[str(d), c, s] for d, c, s in runs])))
    assert not report["tensorflow_imported"]
    return report["runs"]


def _checkpoint_arrays(save_dir):
    with np.load(save_dir / "checkpoint.npz") as f:
        return {key: f[key] for key in f.files if key != "__meta__"}


@pytest.mark.slow
# Adam's step equals TensorFlow's (test_jax_train_step.py), which learns with it (test_loop.py).
@pytest.mark.parametrize("extra", [{}, {"char": False}])
def test_training_goes_far_below_unigram_perplexity(tmp_path, run_files, extra):
    folder, corpus = run_files
    steps = 250
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"], n_train_tokens=16 * 5 * steps, **extra)
    report, = _train(folder, options, (tmp_path / "run", [steps], None))
    unigram = unigram_perplexity(corpus)
    assert report["step"] == steps
    assert report["heldout_perplexity"] < 0.4 * unigram, (report, unigram)
    if extra.get("char", True):
        return
    # Token inputs: the trained table goes to the embedding file, which TensorFlow's bilm reads (prediction ids
    # are the training ids plus one, 0 the padding row).
    with np.load(tmp_path / "run" / "checkpoint.npz") as checkpoint:
        tables = [checkpoint[key] for key in checkpoint.files
                  if key.startswith("bilm/") and checkpoint[key].shape == (corpus["n_vocab"], 8)]
    assert len(tables) == 1
    model = BidirectionalLanguageModel(report["options_file"], report["weight_file"], use_character_inputs=False,
                                       embedding_weight_file=report["embedding_weight_file"], stateful=False,
                                       start="zeros")
    ids = np.array([[1, 5, 9, 2]])
    np.testing.assert_allclose(model(ids)["token_embeddings"].numpy()[0], tables[0][ids[0] - 1], atol=1e-6)


@pytest.mark.slow
def test_stopped_and_signalled_runs_continue_exactly_on_jax_and_pytorch(tmp_path, run_files):
    folder, corpus = run_files
    # The run ends at the training key max_steps (24), before its epoch's 100 steps: whichever comes first.
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"], n_train_tokens=16 * 5 * 100, dropout=0.1,
                           n_negative_samples_batch=8, max_steps=24)
    # On JAX: a run straight to its end; one stopped at step 3 (after a call of no steps), then continued to its
    # end; one sent SIGTERM at batch 20 (it saves step 21; past the 16 batches a JAX run reads ahead), continued by
    # another process. (A run moved from JAX to
    # PyTorch: test_a_run_stopped_on_tensorflow_continues_on_jax_and_pytorch_and_back's round trip.)
    whole, stopped, continued, signalled = _train(
        folder, options, (tmp_path / "whole", [100], None), (tmp_path / "parts", [0, 3], None),
        (tmp_path / "parts", [100], None), (tmp_path / "signalled", [100], 20))
    signalled_continued, = _train(folder, options, (tmp_path / "signalled", [100], None))
    # On PyTorch: a run straight to its end, and one signalled, continued by another process.
    torch_whole, torch_signalled = _train(folder, options, (tmp_path / "torch_whole", [100], None),
                                          (tmp_path / "torch_signalled", [100], 20), backend="torch")
    torch_continued, = _train(folder, options, (tmp_path / "torch_signalled", [100], None), backend="torch")
    assert whole["step"] == 24 and whole["finished"]
    assert stopped["steps_of_each_call"] == [0, 3] and not stopped["finished"]
    assert continued["step"] == 24
    for run in (signalled, torch_signalled):
        assert run["interrupted"] and run["step"] == 21 and run["exit_status"] == 128 + signal.SIGTERM
    assert signalled_continued["step"] == torch_whole["step"] == torch_continued["step"] == 24
    # Each backend restarts its own runs exactly.
    for want_run, runs in (("whole", ("parts", "signalled")), ("torch_whole", ("torch_signalled",))):
        want = _checkpoint_arrays(tmp_path / want_run)
        for run in runs:
            got = _checkpoint_arrays(tmp_path / run)
            assert got.keys() == want.keys()
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{run}: {key}")
    # The dumped weights: TensorFlow's bilm gives the NumPy reference's activations from them.
    options_file = str(tmp_path / "whole" / "weights_options.json")
    weight_file = whole["weight_file"]
    ids = R.char_ids([s for s in SENTENCES if s], json.load(open(options_file))["char_cnn"][
        "max_characters_per_token"])
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
    reference = R.bilm_forward(R.read_weights(weight_file), json.load(open(options_file)), ids)["lm_embeddings"]
    np.testing.assert_allclose(model(ids)["lm_embeddings"].numpy(), reference, atol=1e-5)
    assert np.abs(reference).max() > 0.1


SCRIPT = '''
import runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@pytest.mark.slow
@pytest.mark.parametrize("backend, device_line", [("jax", "bilm: running on jax cpu:0"),
                                                  ("torch", "bilm: running on torch CPU")])
def test_the_training_scripts_run_on_jax_and_pytorch(tmp_path, run_files, backend, device_line):
    folder, corpus = run_files
    # PyTorch runs its steps eagerly: a jit_compile it cannot honour is named, not ignored.
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"], **({"jit_compile": True} if backend == "torch" else {}))
    for key in ("n_tokens_vocab", "n_train_tokens"):  # the vocabulary's size and the shards' tokens
        del options[key]
    (tmp_path / "options.json").write_text(json.dumps(options))
    common = ["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"], "--save_dir", tmp_path / "run",
              "--heldout_prefix", corpus["heldout"]]
    environment = {"BILM_COMMAND": "1"}
    first = run_on_backend(backend, SCRIPT, "bin/train_elmo.py", *common, "--options_file", tmp_path / "options.json",
                           "--max_steps", 20, environment=environment)
    assert device_line in first.stderr and "Finished at step 20" in first.stdout
    assert ("The training key jit_compile is true, and PyTorch runs every training step eagerly"
            in first.stderr) == (backend == "torch")
    again = run_on_backend(backend, SCRIPT, "bin/restart.py", *common, "--max_steps", 40, environment=environment)
    assert "Finished at step 40" in again.stdout and "held-out perplexity" in again.stdout
    # TensorBoard's folder as on TensorFlow (save_dir/logs): an event file of each call.
    assert len(list((tmp_path / "run" / "logs").glob("events.out.tfevents.*"))) == 2
    # What follows a run is the same code on every backend, each tested once: a new run over a checkpoint and
    # another vocabulary refused (tests/commands/test_bad_input.py, TRAIN_CALLS below), the weight file of a JAX
    # and a PyTorch run dumped and loaded (test_usage_and_cli's quick start on every backend, and the move from
    # TensorFlow to JAX and PyTorch and back below).


TRAIN_CALLS = '''
import json, sys
import numpy as np
import bilm.training
from bilm.errors import UserError
from bilm.training.data.lm_dataset import load_training_data

folder = sys.argv[1]
corpus, options = json.load(open(folder + "/corpus.json")), json.load(open(folder + "/options.json"))
data, _ = load_training_data(options, corpus["train"], corpus["vocab"], seed=5)
train = bilm.training.train
report = {"train": f"{train.__module__}.{train.__name__}", "refused": {}}
first = train(options, data, 1, folder + "/calls", folder + "/logs", max_steps=3, seed=5, summary_every=2, verbose=0)
again = train(options, data, 1, folder + "/calls", None, restart_ckpt_file=folder + "/calls", max_steps=2, seed=5,
              verbose=0)
report["steps"] = [first["step"], again["step"]]
train(options, data, 1, folder + "/straight", None, seed=5, max_steps=5, verbose=0)
for name, call in {"new run over a checkpoint": lambda: train(options, data, 1, folder + "/calls", None, seed=5),
                   "unknown argument": lambda: train(options, data, 1, folder + "/other", None, seed=5, log_every=3),
                   "checkpoint elsewhere": lambda: train(options, data, 1, folder + "/calls", None,
                                                         restart_ckpt_file=folder + "/straight", seed=5),
                   # Checked again under the run's writer lock, where no other process comes in between.
                   "new run": lambda: train(options, data, 1, folder + "/straight", None, seed=5, verbose=0),
                   "restart of none": lambda: train(options, data, 1, folder + "/empty", None, seed=5,
                                                    restart_ckpt_file=folder + "/empty", verbose=0)}.items():
    try:
        call()
    except (UserError, TypeError) as error:
        report["refused"][name] = str(error)
arrays = [dict(np.load(folder + f"/{run}/checkpoint.npz")) for run in ("calls", "straight")]
report["same_checkpoint"] = all(np.array_equal(arrays[0][key], arrays[1][key]) for key in arrays[1]
                                if key != "__meta__")
report["tensorflow_imported"] = "tensorflow" in sys.modules
print(json.dumps(report))
'''


@pytest.mark.slow
def test_bilm_training_train_runs_on_jax_with_its_arguments(tmp_path, run_files):
    folder, corpus = run_files
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"], n_train_tokens=16 * 5 * 100)
    (tmp_path / "corpus.json").write_text((folder / "corpus.json").read_text())
    (tmp_path / "options.json").write_text(json.dumps(options))
    report = json_result(run_on_backend("jax", TRAIN_CALLS, tmp_path))
    assert not report["tensorflow_imported"]
    assert report["train"] == "bilm.training.run.loop.train"  # the one for every backend
    # max_steps is the call's (3, then 2 more), and the two calls are one straight run of 5 steps.
    assert report["steps"] == [3, 5] and report["same_checkpoint"]
    refused = report["refused"]
    assert set(refused) == {"new run over a checkpoint", "unknown argument", "checkpoint elsewhere",
                            "new run", "restart of none"}, refused
    assert "restart_ckpt_file" in refused["new run over a checkpoint"] and "log_every" in refused["unknown argument"]
    assert "already holds a run's checkpoint" in refused["new run"]
    assert "train first with bin/train_elmo.py" in refused["restart of none"]
    assert not (tmp_path / "empty" / "checkpoint.npz").exists()
    assert all("\n" not in message for message in refused.values())
    # TensorBoard's scalars of the first call (steps 2 and 3: every 2 steps, and the last pending one is not
    # due), written without TensorFlow, read by TensorFlow's reader (checksums included).
    from tensorflow.core.util import event_pb2
    scalars = {}
    event_files = list((tmp_path / "logs").glob("events.out.tfevents.*"))
    assert len(event_files) == 1
    for record in tf.data.TFRecordDataset(str(event_files[0])):
        event = event_pb2.Event.FromString(record.numpy())
        for value in event.summary.value:
            scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    assert set(scalars) == {"train_perplexity", "gradient_norm", "learning_rate"}, scalars
    assert list(scalars["train_perplexity"]) == [2] and scalars["learning_rate"][2] == pytest.approx(0.3)
    assert 1 < scalars["train_perplexity"][2] < 10 * corpus["n_vocab"] and scalars["gradient_norm"][2] > 0


@pytest.mark.slow
# Two moments of the start, each found by the line the run prints just before it (a delay after the count alone
# lands in one phase or another with the machine's speed): right after the shards' tokens are counted, as the
# run sets itself up, and as the first training step is traced and compiled.
@pytest.mark.parametrize("after_line, delay", [("Counted ", 0.0), ("The first step traces and compiles", 0.5)],
                         ids=["setting_up", "compiling"])
def test_ctrl_c_while_a_run_on_jax_compiles_its_start_ends_in_one_line(tmp_path, run_files, after_line, delay):
    """SIGINT while the run starts (as it sets itself up, and as its first step is traced and compiled): the
    run stops between JAX's calls, never inside one (an exception there could crash the interpreter at its exit,
    status 139), with status 130 and one line."""
    folder, corpus = run_files
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"])
    del options["n_train_tokens"]  # counted from the shards, the last line before the network is built
    (tmp_path / "options.json").write_text(json.dumps(options))
    # Without the tests' compilation cache (conftest.py): the signal must find the start compiling.
    environment = backend_environment("jax", without=["JAX_COMPILATION_CACHE_DIR"])
    process = subprocess.Popen(
        [sys.executable, "bin/train_elmo.py", "--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"],
         "--save_dir", str(tmp_path / "run"), "--options_file", str(tmp_path / "options.json"),
         "--max_steps", "1000"], cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    for line in process.stdout:
        if line.startswith(after_line):
            break
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGINT, (process.returncode, stderr[-2000:])
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("bilm: running on")]
    assert len(lines) == 1 and lines[0].startswith("Stopped by SIGINT"), stderr[-2000:]


LOOP_SETTINGS = '''
import functools, json, os, sys, warnings
from bilm.training.data.lm_dataset import load_training_data
from bilm.training import evaluate_from_files, train
from bilm.training.run import loop, run_checkpoint as checkpoints
from bilm.training.run.run_schedule import SaveTimer

folder = sys.argv[1]
corpus, options = json.load(open(folder + "/corpus.json")), json.load(open(folder + "/options.json"))
data, _ = load_training_data(options, corpus["train"], corpus["vocab"], seed=5)
heldout, _ = load_training_data(options, corpus["heldout"], corpus["vocab"], test=True)
minutes = [0.0]
loop.SaveTimer = functools.partial(SaveTimer, clock=lambda: 60 * minutes[0])


class SlowStream:
    """The stream, whose batch `late_at` comes 11 minutes after the one before it."""
    def __init__(self, late_at):
        self.late_at, self.forward = late_at, data.forward

    def iter_batches(self, *args, skip=0):
        for n, batch in enumerate(data.iter_batches(*args, skip=skip), start=skip):
            if n == self.late_at:
                minutes[0] += 11
            yield batch


def saved_steps(save_dir):
    return [step for step, _ in checkpoints.kept_checkpoints(save_dir)] + [checkpoints.read_meta(save_dir)["step"]]


report = {}
# On the clock: every 10 minutes, the steps far apart (checkpoint_every 1000); batch 18 is late (past the 16
# batches a JAX run reads ahead), so step 19 saves.
train(options, SlowStream(18), 1, folder + "/clock", None, seed=5, max_steps=20, checkpoint_every=1000,
      checkpoint_every_minutes=10, verbose=0)
report["clock"] = saved_steps(folder + "/clock")
# max_to_keep: a save every step, the last two kept.
train(options, data, 1, folder + "/kept", None, seed=5, max_steps=6, checkpoint_every=1, max_to_keep=2, verbose=0)
report["kept"] = saved_steps(folder + "/kept")
# heldout_every: the held-out figure every 2 steps and at the call's end, with heldout_batch_size rows.
result = train(options, data, 1, folder + "/heldout", folder + "/logs", seed=5, max_steps=5, heldout_data=heldout,
               heldout_every=2, heldout_batch_size=4, verbose=1)
report["heldout_perplexity"] = result["heldout_perplexity"]
report["evaluated"] = [evaluate_from_files(corpus["heldout"], corpus["vocab"], folder + "/heldout", batch_size=rows,
                                           verbose=0) for rows in (4, 16)]
# A restart on other data (data_source) starts the stream anew; on the same data it skips what was trained on.
again = train(options, data, 1, folder + "/kept", None, folder + "/kept", seed=5, max_steps=1,
              data_source="other text", verbose=1)
report["restarted_step"] = again["step"]
# A training key that cannot apply on JAX is named in one line before any work.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    train({**options, "jit_compile": False}, data, 1, folder + "/uncompiled", None, seed=5, max_steps=0, verbose=0)
report["warnings"] = [str(w.message) for w in caught]
report["tensorflow_imported"] = "tensorflow" in sys.modules
print(json.dumps(report))
'''


@pytest.mark.slow
def test_the_loop_settings_act_on_jax(tmp_path, run_files):
    """checkpoint_every_minutes, max_to_keep, heldout_every, heldout_batch_size and data_source mean on JAX
    what they mean on TensorFlow (the one loop, bilm.training.run.driver)."""
    folder, corpus = run_files
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"], n_train_tokens=16 * 5 * 100)
    (tmp_path / "corpus.json").write_text((folder / "corpus.json").read_text())
    (tmp_path / "options.json").write_text(json.dumps(options))
    result = run_on_backend("jax", LOOP_SETTINGS, tmp_path)
    report = json_result(result)
    assert not report["tensorflow_imported"]
    assert report["clock"] == [19, 20]  # the late step's save, and the call's last
    assert report["kept"] == [5, 6]
    out = result.stdout
    assert re.findall(r"^(\w+ \d+): held-out perplexity", out, re.M) == ["Step 2", "Step 4", "Step 5"]
    # The figure at the call's end, with heldout_batch_size's rows, as bin/run_test.py gives it with those rows.
    perplexity = float(re.search(r"Step 5: held-out perplexity ([0-9.]+)", out).group(1))
    assert report["heldout_perplexity"] == pytest.approx(perplexity, abs=1e-3)
    assert report["heldout_perplexity"] == pytest.approx(report["evaluated"][0], rel=1e-6)
    assert report["heldout_perplexity"] != pytest.approx(report["evaluated"][1], rel=1e-4)
    scalars = {}
    for record in tf.data.TFRecordDataset([str(f) for f in (tmp_path / "logs").glob("events.out.tfevents.*")]):
        from tensorflow.core.util import event_pb2
        event = event_pb2.Event.FromString(record.numpy())
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append(event.step)
    assert scalars["heldout_perplexity"] == [2, 4, 5]
    assert "New training data: starting at its beginning." in out and report["restarted_step"] == 7
    assert [w for w in report["warnings"] if "jit_compile" in w] == [
        "The training key jit_compile is false, and JAX compiles every training step whole with XLA (only "
        "TensorFlow's steps run uncompiled); on JAX it has no effect."]


MOVE = '''
import json, os, signal, sys
import numpy as np
from bilm.training import dump_weights, evaluate_from_files, train
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.run.run_directory import newest_meta
from bilm.training.run.stop_signals import TrainingInterrupted

# Runs in turn in this process: [save_dir, this call's max_steps, the batch at which the stream sends SIGTERM or
# None, a weight file to dump the result to or None]. Each continues its save_dir's checkpoint if it has one.
folder, runs = sys.argv[1], json.loads(sys.argv[2])
corpus = json.load(open(folder + "/corpus.json"))
options = json.load(open(folder + "/options.json"))
data, _ = load_training_data(options, corpus["train"], corpus["vocab"], seed=5)
heldout, _ = load_training_data(options, corpus["heldout"], corpus["vocab"], test=True)


def signalling(signal_at):
    """`data`, sending this process SIGTERM as it gives batch `signal_at` (None: never)."""
    def iter_batches(*args, skip=0):
        for n, batch in enumerate(type(data).iter_batches(data, *args, skip=skip), start=skip):
            if n == signal_at:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch

    data.iter_batches = iter_batches
    return data


def restart_from(save_dir):
    """The run's directory where it holds a checkpoint (of any backend), which the call continues; else None."""
    return save_dir if os.path.isdir(save_dir) and newest_meta(save_dir) else None


reports = []
for save_dir, max_steps, signal_at, weight_file in runs:
    report = {}
    try:
        report.update(train(options, signalling(signal_at), 1, save_dir, None,
                            restart_from(save_dir), heldout_data=heldout, seed=5, max_steps=max_steps,
                            checkpoint_every=100, save_on_signals=True, verbose=0))
    except TrainingInterrupted as stopped:
        report.update(interrupted=True, step=stopped.step)
    if weight_file:
        dump_weights(save_dir, weight_file)
    reports.append({key: report.get(key) for key in ("step", "heldout_perplexity", "interrupted")})
# The held-out perplexity of each directory of sys.argv[3] (run_test's), read on this backend.
evaluated = [evaluate_from_files(corpus["heldout"], corpus["vocab"], d, verbose=0) for d in json.loads(sys.argv[3])]
print(json.dumps({"runs": reports, "evaluated": evaluated, "tensorflow_imported": "tensorflow" in sys.modules}))
'''


def _weights(path):
    with h5py.File(path, "r") as f:
        return {name: f[name][()] for name in _datasets(f)}


def _datasets(group, prefix=""):
    for name, item in group.items():
        if isinstance(item, h5py.Dataset):
            yield prefix + name
        else:
            yield from _datasets(item, prefix + name + "/")


@pytest.mark.slow
def test_a_run_stopped_on_tensorflow_continues_on_jax_and_pytorch_and_back(tmp_path, run_files):
    """TensorFlow -> JAX, TensorFlow -> PyTorch, and TensorFlow -> JAX -> PyTorch -> TensorFlow each end where the
    uninterrupted TensorFlow run ends, to round-off: every backend reads the checkpoint every backend writes (the
    same random numbers from the same seed and step), and an earlier TensorFlow run's, without TensorFlow on JAX and
    PyTorch."""
    folder, corpus = run_files
    options = tiny_options(n_tokens_vocab=corpus["n_vocab"], n_train_tokens=16 * 5 * 100, dropout=0.1,
                           n_negative_samples_batch=8, max_steps=7)
    (folder / "options.json").write_text(json.dumps(options))

    evaluated = {}

    def on(backend, *runs, evaluate=()):
        report = json_result(run_on_backend(backend, MOVE, folder, json.dumps(
            [[str(tmp_path / d), n, s, w and str(tmp_path / w)] for d, n, s, w in runs]),
            json.dumps([str(tmp_path / d) for d in evaluate])))
        assert backend == "tensorflow" or not report["tensorflow_imported"]
        evaluated.update({(backend, d): value for d, value in zip(evaluate, report["evaluated"])})
        return report["runs"]

    whole, signalled = on("tensorflow", ("whole", 100, None, "whole.hdf5"), ("signalled", 100, 3, None))
    assert whole["step"] == 7 and signalled["interrupted"] and 0 < signalled["step"] < 6, signalled
    for copy in ("to_jax", "to_torch", "round_trip"):
        shutil.copytree(tmp_path / "signalled", tmp_path / copy)
    # A checkpoint of an earlier run on TensorFlow (tf.train's files) continues on JAX as the run's own does.
    as_tensorflow_checkpoints(tmp_path / "to_jax")
    to_jax, round_trip_jax, whole_read_on_jax = on(
        "jax", ("to_jax", 100, None, None), ("round_trip", 1, None, None), ("whole", 0, None, "whole_on_jax.hdf5"),
        evaluate=["whole"])
    to_torch, round_trip_torch = on("torch", ("to_torch", 100, None, None), ("round_trip", 1, None, None),
                                    evaluate=["whole"])
    round_trip, = on("tensorflow", ("round_trip", 100, None, "round_trip.hdf5"))
    assert to_jax["step"] == to_torch["step"] == round_trip["step"] == 7
    assert round_trip_torch["step"] == round_trip_jax["step"] + 1 == signalled["step"] + 2
    for run in (to_jax, to_torch, round_trip):
        assert abs(run["heldout_perplexity"] / whole["heldout_perplexity"] - 1) < 1e-4, (run, whole)
    # run_test on JAX and PyTorch gives the TensorFlow run's held-out perplexity from its checkpoint.
    for backend in ("jax", "torch"):
        assert abs(evaluated[backend, "whole"] / whole["heldout_perplexity"] - 1) < 1e-5, (evaluated, whole)
    # The TensorFlow run's checkpoint, read on JAX without TensorFlow, gives its weight file; the round trip's
    # weights are the uninterrupted run's, to round-off.
    want = _weights(tmp_path / "whole.hdf5")
    for path, tolerance in (("whole_on_jax.hdf5", 0), ("round_trip.hdf5", 1e-4)):
        got = _weights(tmp_path / path)
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=tolerance, atol=tolerance / 10, err_msg=key)
