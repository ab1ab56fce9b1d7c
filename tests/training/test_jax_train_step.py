"""The training step on JAX (`bilm.training.arrays.train_step`) computes TensorFlow's step: from the same weights,
batches and seed, two steps give the same losses, gradient norms, weights, optimizer state and LSTM states,
with the full softmax and without dropout, and with the sampled softmax and dropout (the same random numbers on
both backends); it lowers the loss, repeats itself exactly from its seed, and runs without TensorFlow."""
import json

import numpy as np
import pytest
import tensorflow as tf

from backend_processes import json_result, run_on_backend
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.utils.python_random import seeded_python_random
from tensorflow_reference.optimizers import make_optimizer
from tensorflow_reference.train_step import TrainStep
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import MAX_CHARS, tiny_options

# Each test runs JAX (or PyTorch) in processes of their own: over the fast tier's 3 s.
pytestmark = pytest.mark.slow

ROWS, STEPS, N_VOCAB = 16, 5, 50

JAX_STEPS = '''
import json, sys
import numpy as np
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.utils.python_random import seeded_python_random

import keras
from keras import ops


def steps(folder, n_steps):
    """The case in `folder`: its steps' metrics and the bounds they were compiled for; its weights after them
    to folder/<backend>.npz."""
    options = json.load(open(folder + "/options.json"))
    start = np.load(folder + "/start.npz")
    batches = np.load(folder + "/batches.npz")
    _, settings = training_settings(options)
    with seeded_python_random(3):  # as a run starts from its seed (bilm.training.arrays.training_run)
        step = ArrayTrainStep(load_options(options), settings, seed=3)
    state = step.initial_state(softmax_seed=3)
    assert step.names == json.load(open(folder + "/names.json")), (step.names, "differ from TensorFlow's")
    # From one seed, the run's initial weights are TensorFlow's (drawn there from the same seed).
    drawn = {**{"model/" + name: v for name, v in zip(step.names, state["bilm"])},
             **{"model/softmax/" + part: value for part, value in state["softmax"].items()}}
    differing_start = sorted(name for name, value in drawn.items()
                             if not np.array_equal(ops.convert_to_numpy(value), start[name]))
    state["bilm"] = [ops.convert_to_tensor(start["model/" + name]) for name in step.names]
    state["softmax"] = {part: ops.convert_to_tensor(start["model/softmax/" + part]) for part in state["softmax"]}
    # On the step's devices, as the step's own states are: arrays placed otherwise would compile it again.
    state = step.place(state)
    outputs = []
    for i in range(n_steps):
        batch = {key[len(f"{i}/"):]: value for key, value in batches.items() if key.startswith(f"{i}/")}
        state, metrics = step(state, batch, i)
        outputs.append({k: float(v) for k, v in metrics.items()})
    arrays = {**{"model/" + name: ops.convert_to_numpy(v) for name, v in zip(step.names, state["bilm"])},
              **{"model/softmax/" + part: ops.convert_to_numpy(value) for part, value in state["softmax"].items()},
              **{"state/" + key: ops.convert_to_numpy(v) for key, v in state["lstm"].items()}}
    np.savez(f"{folder}/{keras.backend.backend()}.npz", **arrays)
    # The bounds on the batches' distinct tokens the steps were compiled for (None: every token encoded).
    return {"outputs": outputs, "bounds": sorted(set(step.compiled_bounds()), key=str),
            "differing_start": differing_start}


# Each case (a folder of sys.argv[2:]) in turn; a case that raises is reported, and the others still run.
reports = {}
for folder in sys.argv[2:]:
    try:
        reports[folder] = steps(folder, int(sys.argv[1]))
    except Exception:
        import traceback
        reports[folder] = {"error": traceback.format_exc()}
print(json.dumps({"cases": reports, "tensorflow_imported": "tensorflow" in sys.modules}))
'''


def _batches(n, seed=0, char=True):
    rng = np.random.default_rng(seed)
    batches = []
    for i in range(n):
        if char:
            batch = {key: rng.integers(0, 261, size=(ROWS, STEPS, MAX_CHARS)).astype(np.int32)
                     for key in ("token_characters", "token_characters_reverse")}
        else:  # ids of [10 i, 10 i + 12): some rows read by one step only, none past half the vocabulary
            batch = {key: rng.integers(10 * i, 10 * i + 12, size=(ROWS, STEPS)).astype(np.int32)
                     for key in ("token_ids", "token_ids_reverse")}
        batch.update({key: rng.integers(0, N_VOCAB, size=(ROWS, STEPS)).astype(np.int32)
                      for key in ("next_token_id", "next_token_id_reverse")})
        batches.append(batch)
    return batches


def _tensorflow_steps(folder, options, n_steps):
    """Runs `n_steps` TensorFlow steps; writes the start weights and the batches for the JAX process; returns
    `(outputs of each step, {name: array} after them)`."""
    _, settings = training_settings(options)
    # As a run starts from its seed (bilm.training.tensorflow.training_run's set_random_seed, of which the network's
    # draws read Python's generator alone).
    with seeded_python_random(3):
        lm = TrainingLM(load_options(options), settings, softmax_seed=3)
    optimizer = make_optimizer(settings, lm.trainable_variables())
    states = {key: tf.Variable(tf.zeros([ROWS, size]), name=key) for key, _, size in lm.state_keys}
    variables = {**{f"model/{k}": v for k, v in lm.trainable_variables().items()},
                 **{f"state/{k}": v for k, v in states.items()}}
    np.savez(folder / "start.npz", **{name: v.numpy() for name, v in variables.items()})
    (folder / "names.json").write_text(json.dumps([v.path for v in lm.network.trainable_variables]))
    batches = _batches(n_steps, char="char_cnn" in options)
    np.savez(folder / "batches.npz", **{f"{i}/{key}": value for i, batch in enumerate(batches)
                                        for key, value in batch.items()})
    step = TrainStep(lm, optimizer, states, tf.distribute.get_strategy(), settings, seed=3)
    outputs = [{k: float(v) for k, v in step({k: tf.constant(v) for k, v in batch.items()}, i).items()}
               for i, batch in enumerate(batches)]
    return outputs, {name: v.numpy() for name, v in variables.items()}


# Adam at its own rate: each step moves a weight by about the rate whatever its gradient's size, so a rate as
# large as Adagrad's (0.3) turns the backends' round-off in small gradients into differences of 1e-3.
# bfloat16 operands (the highway's and the LSTMs' input-half products): the same roundings on both backends,
# summed in other orders, so to bfloat16's precision.
# Sampled softmax and dropout: the same masks and negatives from the seed on both backends. Token inputs with
# Adam: the embedding's rows the batches do not read keep their values and moments (lazy, as on TensorFlow);
# with share_embedding_softmax the table is the softmax's too (sampled rows, or whole with the full softmax).
RANDOM = {"sample_softmax": True, "n_negative_samples_batch": 20, "dropout": 0.3}
TOKENS = {"char": False}
SHARED = {"char": False, "share_embedding_softmax": True}


# Each case: (optimizer, learning_rate, matmul_dtype, tolerance, extra options).
CASES = {"bfloat16": ("adagrad", 0.3, "bfloat16", 300.0, {}), "random": ("adagrad", 0.3, "float32", 1.0, RANDOM),
         "tokens-adam": ("adam", 0.002, "float32", 1.0, {**RANDOM, **TOKENS}),
         "shared-sampled-adam": ("adam", 0.002, "float32", 1.0, {**RANDOM, **SHARED}),
         "shared-full": ("adagrad", 0.3, "float32", 1.0, SHARED)}


# The step is written once for JAX and PyTorch: these cases reach each of JAX's own primitives (the jit sampler,
# fixed-shape rows, Adagrad and Adam's row updates) and bfloat16's roundings; the full softmax's dense updates,
# shared code, are PyTorch's cases below. Each backend runs its cases in one process of its own.
def test_two_steps_equal_tensorflows(tmp_path):
    _check_steps_equal_tensorflows(tmp_path, "jax", ["bfloat16", "random", "tokens-adam", "shared-sampled-adam"])


# PyTorch runs the same step (written once in keras.ops) with its own gradient, rows and sampler: the cases
# that reach each of them (dense Adagrad, the sampler and dropout, row-sparse Adam on a token table, a shared
# table).
def test_two_steps_on_pytorch_equal_tensorflows(tmp_path):
    _check_steps_equal_tensorflows(tmp_path, "torch", ["random", "tokens-adam", "shared-sampled-adam", "shared-full"])


# TensorFlow runs the array step too (its state in variables, rows scattered in place): every case against its
# own TrainStep where its own primitives are reached (the tape, a shared table's two uses, rows scattered, the sampler).
# Compiled with XLA, it equals itself uncompiled (test_compiled_step.py).
def test_the_array_step_on_tensorflow_equals_tensorflows_train_step(tmp_path):
    _check_steps_equal_tensorflows(tmp_path, "tensorflow", ["random", "tokens-adam", "shared-full"])


def _check_steps_equal_tensorflows(tmp_path, backend, cases):
    wanted = {}
    for case in cases:
        optimizer, learning_rate, matmul_dtype, _, extra = CASES[case]
        options = tiny_options(n_tokens_vocab=N_VOCAB, optimizer=optimizer, learning_rate=learning_rate,
                               matmul_dtype=matmul_dtype, **{"jit_compile": False, "sample_softmax": False, **extra})
        (tmp_path / case).mkdir()
        (tmp_path / case / "options.json").write_text(json.dumps(options))
        wanted[case] = _tensorflow_steps(tmp_path / case, options, 2)
    report = json_result(run_on_backend(backend, JAX_STEPS, 2, *[tmp_path / case for case in cases]))
    assert report["tensorflow_imported"] == (backend == "tensorflow")
    for case in cases:
        got = report["cases"][str(tmp_path / case)]
        assert "error" not in got, f"{case}: {got.get('error')}"
        assert got["differing_start"] == [], (case, got["differing_start"])
        _assert_same_steps(tmp_path / case, backend, case, got, *wanted[case])


def _assert_same_steps(folder, backend, case, report, want_outputs, want):
    _, _, _, tolerance, extra = CASES[case]
    char = extra.get("char", True)
    # JAX's steps of a character model encode each distinct token once (PyTorch finds them eagerly).
    assert (report["bounds"] != [None]) == (backend == "jax" and char), (case, report["bounds"])
    for got, expected in zip(report["outputs"], want_outputs, strict=True):
        for key in ("loss", "norm", "forward", "backward"):
            np.testing.assert_allclose(got[key], expected[key], rtol=2e-5 * tolerance, err_msg=f"{case}: {key}")
    with np.load(folder / f"{backend}.npz") as got:
        assert set(got) == set(want), case
        for name, expected in want.items():
            np.testing.assert_allclose(got[name], expected, rtol=1e-4 * tolerance, atol=2e-6 * tolerance,
                                       err_msg=f"{case}: {name}")
    assert np.abs(want["state/forward_1_h"]).max() > 1e-3, case  # states carried, not zeros
    if not char and not extra.get("share_embedding_softmax"):  # rows no batch read: unchanged on both
        with np.load(folder / "start.npz") as start:
            table = "model/token_embedding/embeddings"
            np.testing.assert_array_equal(want[table][N_VOCAB // 2:], start[table][N_VOCAB // 2:], err_msg=case)


TWO_DEVICES = '''
import json, sys
import jax
import keras
import numpy as np
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.backend.jax.training_ops import Placement
from bilm.training.arrays.train_step import ArrayTrainStep

folder = sys.argv[1]
options = json.load(open(folder + "/options.json"))
batches = np.load(folder + "/batches.npz")
assert len(jax.devices()) == 2, jax.devices()
runs = {}
for name, devices, rows in (("one", jax.devices()[:1], 16), ("two", jax.devices(), 8)):
    _, settings = training_settings({**options, "batch_size": rows})
    keras.utils.set_random_seed(7)  # the same initial weights in both
    step = ArrayTrainStep(load_options(options), settings, seed=3, placement=Placement(devices))
    assert step.global_batch_size == 16
    state = step.initial_state()
    losses = []
    for i in range(3):
        batch = {key[len(f"{i}/"):]: value for key, value in batches.items() if key.startswith(f"{i}/")}
        state, metrics = step(state, batch, i)
        losses.append(float(metrics["loss"]))
    runs[name] = losses, jax.tree_util.tree_leaves(jax.device_get(state))
    if name == "two":
        assert len(state["lstm"]["forward_0_c"].sharding.device_set) == 2
deviation = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(runs["one"][1], runs["two"][1]))
print(json.dumps({"losses": {k: v[0] for k, v in runs.items()}, "deviation": deviation}))
'''


def test_two_devices_compute_what_one_computes_on_the_stacked_batch(tmp_path):
    options = tiny_options(n_tokens_vocab=N_VOCAB, n_negative_samples_batch=16, dropout=0.1, jit_compile=False)
    (tmp_path / "options.json").write_text(json.dumps(options))
    np.savez(tmp_path / "batches.npz", **{f"{i}/{key}": value for i, batch in enumerate(_batches(3))
                                          for key, value in batch.items()})
    report = json_result(run_on_backend("jax", TWO_DEVICES, tmp_path,
                                        environment={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}))
    np.testing.assert_allclose(report["losses"]["two"], report["losses"]["one"], rtol=1e-5)
    assert report["deviation"] < 1e-5


VOCABULARY_SIZED = '''
import json, sys
import jax
import numpy as np
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.arrays.train_step import ArrayTrainStep

options = json.loads(sys.argv[1])
_, settings = training_settings(options)
step = ArrayTrainStep(load_options(options), settings, seed=3)
batch = {key: np.random.RandomState(0).randint(0, 60, (settings.batch_size, settings.unroll_steps)).astype(np.int32)
         for key in step.batch_keys()}
program = jax.make_jaxpr(lambda state, batch: step._step_of(state, batch, np.int32(5), False))(step.initial_state(),
                                                                                                batch)
made = set()


def walk(jaxpr):
    for equation in jaxpr.eqns:
        made.update(equation.primitive.name for v in equation.outvars
                    if settings.n_tokens_vocab in getattr(v.aval, "shape", ()))
        for parameter in equation.params.values():
            inner = getattr(parameter, "jaxpr", parameter)
            if hasattr(inner, "eqns"):
                walk(inner)


walk(program.jaxpr)
print(json.dumps(sorted(made)))
'''


# A token model's step (the table of 793,471 rows of the original vocabulary) differentiates the rows its batch
# reads, never the table: its program makes no vocabulary-sized array but the state's tables and slots updated
# by rows (a dense gradient is a table of zeros, scatter-added into).
@pytest.mark.parametrize("shared", [False, True])
def test_a_token_models_step_makes_no_vocabulary_sized_array_but_its_row_updates(shared):
    options = tiny_options(n_tokens_vocab=4099, char=False, sample_softmax=True, n_negative_samples_batch=16,
                           optimizer="adam", share_embedding_softmax=shared)
    made = json_result(run_on_backend("jax", VOCABULARY_SIZED, json.dumps(options)))
    assert set(made) <= {"scatter", "scatter-add"}, made


HELD_ONCE = '''
import json, sys, tempfile
import keras
import numpy as np
from keras import ops
from bilm.backend import training_ops
from bilm.training.run import run_checkpoint
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.arrays.train_step import ArrayTrainStep

options = json.loads(sys.argv[1])
_, settings = training_settings(options)
step = ArrayTrainStep(load_options(options), settings, seed=3)
state = step.initial_state()
shape = (settings.batch_size, settings.unroll_steps)
batch = {key: np.random.RandomState(0).randint(0, settings.n_tokens_vocab, shape).astype(np.int32)
         for key in step.batch_keys()}
variables = step.network.trainable_variables
backend = keras.backend.backend()


def second_copies():
    """How many of the network's weights are held apart from the state's (a live array of their own)."""
    if backend == "jax":  # the state's buffers donated: the network's arrays, the same ones, deleted
        return sum(not variable.value.is_deleted() for variable in variables)
    if backend == "torch":
        return sum(v.value.data_ptr() != held.data_ptr() for v, held in zip(variables, state["bilm"]))
    return sum(v.value is not held for v, held in zip(variables, state["bilm"]))


def held_apart(template, restored):
    """How many of `template`'s arrays a restore into it left holding their own values beside `restored`'s."""
    pairs = list(zip(keras.tree.flatten(template), keras.tree.flatten(restored), strict=True))
    if backend == "jax":  # consumed: the template's buffers freed
        return sum(not old.is_deleted() for old, _ in pairs)
    if backend == "torch":
        return sum(old.data_ptr() != new.data_ptr() for old, new in pairs)
    return sum(old is not new for old, new in pairs)


for number in range(2):
    state, _ = step(state, batch, number)
copies = second_copies()
step.write_weights(state)  # the network's weights again, the state's values
same = all(np.array_equal(ops.convert_to_numpy(v.value), ops.convert_to_numpy(held))
           for v, held in zip(variables, state["bilm"]))
# A restore writes the checkpoint into the state it replaces (here the state one step later): held once.
saved = [ops.convert_to_numpy(value) for value in keras.tree.flatten(state)]
path = run_checkpoint.save_checkpoint(tempfile.mkdtemp(), state, 2, {}, 0)
state, _ = step(state, batch, 2)
restored, _ = run_checkpoint.load_checkpoint(path, state, training_ops().write_into)
restored_values = all(np.array_equal(ops.convert_to_numpy(value), want)
                      for value, want in zip(keras.tree.flatten(restored), saved, strict=True))
apart = held_apart(state, restored)
refusal = None  # a tf.distribute strategy given to JAX's or PyTorch's training: one line
if backend != "tensorflow":
    from bilm.errors import UserError
    try:
        training_ops().training_placement(1, strategy=object())
    except UserError as error:
        refusal = str(error)
print(json.dumps({"copies": copies, "same": same, "n": len(variables), "refusal": refusal,
                  "restored": restored_values, "apart": apart}))
'''


# The state holds the network's weights where the network holds them: after steps, no second copy of the
# biLM (a token model's table among them) lives beside the state's; writing the weights gives the network the
# state's values; a restore leaves no array of the state it replaces beside the checkpoint's. (And JAX's and
# PyTorch's training refuse a tf.distribute strategy in one line.)
@pytest.mark.parametrize("backend", ["jax", "torch", "tensorflow"])
def test_the_networks_weights_are_held_once(backend):
    options = tiny_options(n_tokens_vocab=N_VOCAB, char=False, sample_softmax=True, n_negative_samples_batch=16,
                           batch_size=4)
    report = json_result(run_on_backend(backend, HELD_ONCE, json.dumps(options)))
    refusal = None if backend == "tensorflow" else (
        f"strategy is a tf.distribute.Strategy, for TensorFlow; on {dict(jax='JAX', torch='PyTorch')[backend]}, "
        "n_gpus devices share each batch (leave strategy out).")
    assert report["n"] > 5 and report == {"copies": 0, "same": True, "n": report["n"], "refusal": refusal,
                                          "restored": True, "apart": 0}, report
