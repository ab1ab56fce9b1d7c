"""Which strategy trains and which worker writes; several replicas train as one device with their batches
stacked (bilm-tf's towers).

With dropout 0 and the full softmax, a step of R replicas with batch b each
is a step of one device with batch R * b: the mean of the replicas' mean
losses is the mean loss of the stacked batch, and their averaged gradients
its gradient. Each configuration runs in subprocesses (logical devices and
TF_CONFIG are process-wide).
"""
import json
import os
import socket
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

import warm_python
from bilm.backend.tensorflow.distribution import is_chief, make_strategy
from bilm.training.run.loop import train
from helpers import ROOT, TESTS
from training_helpers import checkpoint_arrays, open_data, tiny_options, write_corpus

STEPS = 3

RUNNER = """
import json, sys
config = json.loads(sys.argv[1])
import tensorflow as tf
if config["logical_cpus"]:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, config["tests"])
from training_helpers import open_data
from bilm.backend.tensorflow.distribution import make_strategy
from bilm.training.run.loop import train
# One strategy for all the runs: a process sets up its cluster's collectives once.
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if config["logical_cpus"] else make_strategy()
for run in config["runs"]:
    result = train(run["options"], open_data(run["options"], config["corpus"]), 1, run["save_dir"], None,
                   strategy=strategy, max_steps=run["steps"], seed=1, verbose=0)
    print("RESULT " + json.dumps(result), flush=True)
"""


@pytest.mark.parametrize("tf_config", [
    None,
    "",
    {"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 0}},
    {"cluster": {"worker": ["localhost:1"], "evaluator": ["localhost:2"]}},  # only chiefs and workers train
])
def test_one_worker_and_one_gpu_or_none_train_with_the_default_strategy(monkeypatch, tf_config):
    # A cluster of more than one chief or worker gets MultiWorkerMirroredStrategy, which changes the
    # whole process: test_multi_worker_two_workers_equal_one_device_with_twice_the_batch runs it.
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config if isinstance(tf_config, str) else json.dumps(tf_config))
    assert make_strategy() is tf.distribute.get_strategy()
    assert make_strategy(n_gpus=1) is tf.distribute.get_strategy()


def test_more_gpus_than_the_machine_has_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    n_gpus = len(tf.config.list_logical_devices("GPU"))
    with pytest.raises(ValueError, match=rf"n_gpus={n_gpus + 2} but this machine shows {n_gpus} GPU\(s\)"):
        make_strategy(n_gpus=n_gpus + 2)


def _strategy(task_type=None, task_id=0, cluster=None):
    """A stand-in for a strategy whose cluster resolver says which task this is."""
    spec = types.SimpleNamespace(as_dict=lambda: cluster or {})
    resolver = types.SimpleNamespace(task_type=task_type, task_id=task_id, cluster_spec=lambda: spec)
    return types.SimpleNamespace(cluster_resolver=resolver)


@pytest.mark.parametrize("strategy, chief", [
    (tf.distribute.get_strategy(), True),  # one machine
    (types.SimpleNamespace(), True),  # no cluster resolver
    (_strategy(None), True),
    (_strategy("chief", cluster={"chief": ["a"], "worker": ["b"]}), True),
    (_strategy("worker", 0, {"worker": ["a", "b"]}), True),  # without a chief, worker 0 writes
    (_strategy("worker", 1, {"worker": ["a", "b"]}), False),
    (_strategy("worker", 0, {"chief": ["a"], "worker": ["b"]}), False),
    (_strategy("evaluator", 0, {"worker": ["a"], "evaluator": ["b"]}), False),
])
def test_only_the_chief_or_else_worker_0_writes(strategy, chief):
    assert is_chief(strategy) is chief


EACH_REPLICA = """
import json
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bilm.backend.tensorflow.training_ops import Placement
placement = Placement(strategy=tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))

def function(rows, lstm, replica):  # replica r: rows (2, 3 + r), values (1, 2) * 10 ** r
    r = tf.cast(replica, tf.int32)
    scale = tf.cast(10 ** r, tf.float32)
    sparse = {"table": (tf.stack([2, 3 + r]), tf.constant([[1.0], [2.0]]) * scale)}
    means = {"x": tf.reduce_mean(rows["x"]), "replica": tf.cast(replica, tf.float32)}
    return means, sparse, {"h": lstm["h"] * 2 + tf.cast(r, tf.float32)}

batch = {"x": tf.reshape(tf.range(8, dtype=tf.float32), (4, 2))}
lstm = {"h": tf.reshape(tf.range(4, dtype=tf.float32), (4, 1)) * 10}
means, sparse, stacked = tf.function(lambda b, h: placement.each_replica(function, b, h, 6, jit_compile=False),
                                     autograph=False)(batch, lstm)
print(json.dumps({"n_replicas": placement.n_replicas, "means": {k: float(v) for k, v in means.items()},
                  "rows": sparse["table"][0].numpy().tolist(), "values": sparse["table"][1].numpy().tolist(),
                  "stacked": stacked["h"].numpy().tolist()}))
"""


@pytest.mark.slow
def test_each_replica_differentiates_its_rows_and_combines_what_one_device_would():
    process = warm_python.run([sys.executable, "-c", EACH_REPLICA], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    got = json.loads(process.stdout.splitlines()[-1])
    assert got["n_replicas"] == 2
    assert got["means"] == {"x": 3.5, "replica": 0.5}  # the global batch's mean; replicas numbered 0 and 1
    # Row 2 from both replicas summed, each row's sum averaged over the replicas; `6` pads (no row).
    assert got["rows"] == [2, 3, 4, 6]
    assert got["values"] == [[5.5], [1.0], [10.0], [0.0]]
    assert got["stacked"] == [[0.0], [20.0], [41.0], [61.0]]  # each replica's rows of the LSTM states, in order


def _exact_options(batch_size):
    return tiny_options(dropout=0.0, sample_softmax=False, batch_size=batch_size)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=300, n_heldout=10)


@pytest.fixture(scope="module")
def single_device(corpus, tmp_path_factory):
    """`(initial arrays, arrays after STEPS steps)` of one device with batch 4."""
    options = _exact_options(4)
    save_dir = tmp_path_factory.mktemp("single")
    initial = train(options, open_data(options, corpus), 1, save_dir, None, max_steps=0, seed=1, verbose=0)
    initial_arrays = checkpoint_arrays(initial["checkpoint"])
    result = train(options, open_data(options, corpus), 1, save_dir, None, restart_ckpt_file=initial["checkpoint"],
                   max_steps=STEPS, seed=1, verbose=0)
    return initial_arrays, checkpoint_arrays(result["checkpoint"])


@pytest.fixture(scope="module")
def adam_single_device(corpus, single_device, tmp_path_factory):
    """`(initial arrays, arrays after STEPS Adam steps)` of one device with batch 4 (the same start as
    `single_device`: the same seed and architecture)."""
    options = _adam_options(4)
    result = train(options, open_data(options, corpus), 1, tmp_path_factory.mktemp("adam_single"), None,
                   max_steps=STEPS, seed=1, verbose=0)
    expected = checkpoint_arrays(result["checkpoint"])
    assert "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE" in expected
    return single_device[0], expected


def _start(tmp_path, config, env=None, name="runner"):
    script = tmp_path / f"{name}.py"
    script.write_text(RUNNER)
    env = dict(os.environ, **(env or {}))
    return warm_python.Popen([sys.executable, str(script), json.dumps(config)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _results(process, timeout=300):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    assert process.returncode == 0, err[-3000:]
    return [json.loads(line[len("RESULT "):]) for line in out.splitlines() if line.startswith("RESULT ")]


# Adam divides each gradient by its running root mean square. Where the replicas' partial gradients of a weight
# nearly cancel, their round-off is large against the gradient itself, and moves the weight by up to that fraction
# of a step (3.1e-6 at one char CNN weight of this model, learning rate 0.01): 1e-3 of a step bounds it. A replica
# that counted its own moments or steps would move the weights by whole steps.
ADAM_ATOL = 2e-6 + 1e-3 * 0.01


def _assert_same_step(got, single_device, atol=2e-6):
    initial, expected = single_device
    keys = [k for k in expected if k.startswith(("model/", "softmax/", "optimizer/", "lstm_states/"))]
    assert keys and sorted(keys) == sorted(k for k in got if k.startswith(("model/", "softmax/", "optimizer/",
                                                                            "lstm_states/")))
    for key in keys:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=atol, err_msg=key)
    # ... and the steps did change the weights.
    assert max(np.abs(expected[k] - initial[k]).max() for k in keys if k.startswith("model/")) > 1e-3


@pytest.mark.slow
def test_mirrored_two_replicas_equal_one_device_with_twice_the_batch(tmp_path, corpus, single_device,
                                                                    adam_single_device):
    sampled = tiny_options(dropout=0.1, batch_size=2)  # the real recipe also runs on two replicas
    adam = _adam_options(2)
    config = {"logical_cpus": True, "tests": TESTS, "corpus": corpus, "runs": [
        {"options": _exact_options(2), "save_dir": str(tmp_path / "mirrored"), "steps": STEPS},
        {"options": sampled, "save_dir": str(tmp_path / "sampled"), "steps": STEPS},
        {"options": adam, "save_dir": str(tmp_path / "adam"), "steps": STEPS},
    ]}
    exact, recipe, mirrored_adam = _results(_start(tmp_path, config))
    assert exact["step"] == recipe["step"] == STEPS and np.isfinite(recipe["loss"])
    arrays = checkpoint_arrays(exact["checkpoint"])
    assert arrays["lstm_states/forward_0_c/.ATTRIBUTES/VARIABLE_VALUE"].shape == (4, 16)
    _assert_same_step(arrays, single_device)
    # Adam's moments and step count follow the replicas the same way.
    _assert_same_step(checkpoint_arrays(mirrored_adam["checkpoint"]), adam_single_device, ADAM_ATOL)


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _adam_options(batch_size):
    return dict(_exact_options(batch_size), optimizer="adam", learning_rate=0.01)  # ADAM_ATOL's learning rate


@pytest.mark.slow
def test_multi_worker_two_workers_equal_one_device_with_twice_the_batch(tmp_path, corpus, single_device,
                                                                        adam_single_device):
    cluster = {"worker": [f"localhost:{_free_port()}" for _ in range(2)]}
    save_dir, adam_dir = str(tmp_path / "multi"), str(tmp_path / "multi_adam")
    config = {"logical_cpus": False, "tests": TESTS, "corpus": corpus, "runs": [
        {"options": _exact_options(2), "save_dir": save_dir, "steps": STEPS},
        {"options": _adam_options(2), "save_dir": adam_dir, "steps": STEPS}]}
    tf_configs = [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(2)]
    workers = [_start(tmp_path, config, {"TF_CONFIG": tf_config}, name=f"worker_{i}")
               for i, tf_config in enumerate(tf_configs)]
    results = [_results(worker) for worker in workers]
    assert [[run["step"] for run in r] for r in results] == [[STEPS, STEPS], [STEPS, STEPS]]
    assert results[0][0]["loss"] == pytest.approx(results[1][0]["loss"], rel=1e-6)
    # Only the chief (worker 0) writes to save_dir.
    assert sorted(os.listdir(save_dir)) == ["checkpoint.npz", "options.json"]
    assert results[0][0]["checkpoint"] == os.path.join(save_dir, "checkpoint.npz")
    _assert_same_step(checkpoint_arrays(os.path.join(save_dir, "checkpoint.npz")), single_device)
    # Adam (SparseAdam: moments and step count) across two machines is Adam on one device too.
    _assert_same_step(checkpoint_arrays(os.path.join(adam_dir, "checkpoint.npz")), adam_single_device, ADAM_ATOL)
