"""The device line every script prints first, the --n_gpus warning, and the float32 switches the scripts set.

A GPU is faked by patching `tf.config`'s device lists and details; the
switches are patched too, so that nothing here changes this process.
"""
import argparse
import importlib.util
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import bilm.backend.jax.devices as jax_devices
import bilm.commands.devices as devices
import warm_python
from bilm.errors import UserError
from bilm.training.run import run_checkpoint
from helpers import ROOT
from training_helpers import tiny_options, write_corpus

H100 = {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)}


@pytest.fixture
def fake_gpus(monkeypatch):
    """`fake_gpus(n, details)`: TensorFlow sees `n` GPUs, each with `details`."""
    real_physical, real_logical = tf.config.list_physical_devices, tf.config.list_logical_devices

    def fake(n, details=H100):
        gpus = [(tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU"),
                 tf.config.LogicalDevice(f"/device:GPU:{i}", "GPU")) for i in range(n)]

        def physical(device_type=None):
            return [p for p, _ in gpus] if device_type == "GPU" else real_physical(device_type)

        def logical(device_type=None):
            return [lg for _, lg in gpus] if device_type == "GPU" else real_logical(device_type)

        def get_device_details(device):
            assert device in [p for p, _ in gpus]
            return dict(details)

        monkeypatch.setattr(tf.config, "list_physical_devices", physical)
        monkeypatch.setattr(tf.config, "list_logical_devices", logical)
        monkeypatch.setattr(tf.config.experimental, "get_device_details", get_device_details)

    return fake


@pytest.fixture
def switches(monkeypatch):
    """The calls that `set_numerics` makes, recorded instead of made."""
    calls = []
    monkeypatch.setattr(tf.config.experimental, "enable_tensor_float_32_execution",
                        lambda enabled: calls.append(("tf32", enabled)))
    monkeypatch.setattr(tf.config.experimental, "enable_op_determinism", lambda: calls.append(("determinism",)))
    return calls


def test_on_a_cpu_the_line_says_no_gpu_is_visible(fake_gpus):
    fake_gpus(0)
    assert devices.describe_devices() == "bilm: running on CPU (no GPU visible to TensorFlow)"


def test_each_gpu_is_named_with_its_compute_capability_then_the_cpu(fake_gpus):
    fake_gpus(1)
    assert devices.describe_devices() == (
        "bilm: running on GPU:0 (NVIDIA H100 80GB HBM3, compute capability 9.0), CPU")
    fake_gpus(2, {"device_name": "NVIDIA A100-SXM4-40GB", "compute_capability": (8, 0)})
    assert devices.describe_devices() == (
        "bilm: running on GPU:0 (NVIDIA A100-SXM4-40GB, compute capability 8.0), "
        "GPU:1 (NVIDIA A100-SXM4-40GB, compute capability 8.0), CPU")


@pytest.mark.parametrize("details, named", [
    ({}, "GPU:0"),  # a plugin's GPU that reports nothing
    ({"device_name": "Apple M2"}, "GPU:0 (Apple M2)"),
])
def test_a_gpu_without_details_is_named_by_what_tensorflow_reports(fake_gpus, details, named):
    fake_gpus(1, details)
    assert devices.describe_devices() == f"bilm: running on {named}, CPU"


def test_a_split_gpu_names_its_logical_devices_without_details(fake_gpus, monkeypatch):
    fake_gpus(1)
    split = [tf.config.LogicalDevice(f"/device:GPU:{i}", "GPU") for i in range(2)]
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda device_type=None: split)
    assert devices.describe_devices() == "bilm: running on GPU:0, GPU:1, CPU"


@pytest.mark.parametrize("n_gpus", [None, 1, 2])
def test_no_warning_where_the_gpus_asked_for_are_seen_or_none_was_asked_for(fake_gpus, n_gpus):
    fake_gpus(2)
    assert devices.missing_gpus_warning(n_gpus) is None
    fake_gpus(0)
    assert devices.missing_gpus_warning(None) is None


@pytest.mark.parametrize("cuda, reason", [
    (True, "check that nvidia-smi shows the GPU; pip install 'bilm[gpu]' installs TensorFlow's CUDA libraries; "
           "TF_CPP_MIN_LOG_LEVEL=0 shows TensorFlow's own reason"),
    (False, "this TensorFlow is built without CUDA; on Linux, pip install 'bilm[gpu]' installs one with it"),
])
def test_a_gpu_asked_for_but_not_seen_is_a_warning_that_tensorflow_runs_on_the_cpu(fake_gpus, monkeypatch, cuda,
                                                                                   reason):
    fake_gpus(0)
    monkeypatch.setattr(tf.test, "is_built_with_cuda", lambda: cuda)
    assert devices.missing_gpus_warning(1) == (
        f"Warning: --n_gpus 1 asks for a GPU, but TensorFlow sees none and runs on the CPU ({reason}).")
    assert devices.missing_gpus_warning(4).startswith("Warning: --n_gpus 4 asks for 4 GPUs, but TensorFlow sees none")


def test_fewer_gpus_than_asked_is_left_to_make_strategys_error(fake_gpus):
    fake_gpus(1)
    assert devices.missing_gpus_warning(2) is None


def test_announce_prints_the_line_then_the_warning_on_stderr(fake_gpus, capsys):
    fake_gpus(0)
    devices.announce_devices()
    devices.announce_devices(n_gpus=1)
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[:2] == ["bilm: running on CPU (no GPU visible to TensorFlow)"] * 2
    assert len(lines) == 3 and lines[2].startswith("Warning: --n_gpus 1 asks for a GPU")
    stream = io.StringIO()
    fake_gpus(1)
    devices.announce_devices(n_gpus=1, file=stream)
    assert stream.getvalue() == "bilm: running on GPU:0 (NVIDIA H100 80GB HBM3, compute capability 9.0), CPU\n"


@pytest.mark.parametrize("n_gpus, tf32, deterministic, calls", [
    (0, False, False, [("tf32", False)]),
    (0, True, True, [("tf32", True)]),  # on a CPU, op determinism stays off
    (1, False, False, [("tf32", False)]),
    (1, False, True, [("tf32", False), ("determinism",)]),
    (1, True, True, [("tf32", True), ("determinism",)]),
])
def test_set_numerics_turns_tf32_off_unless_asked_and_determinism_on_only_with_a_gpu(fake_gpus, switches, n_gpus,
                                                                                     tf32, deterministic, calls):
    fake_gpus(n_gpus)
    assert devices.set_numerics(tf32=tf32, deterministic=deterministic) is (("determinism",) in calls)
    assert switches == calls


def test_set_numerics_defaults_to_float32_without_determinism(fake_gpus, switches):
    fake_gpus(1)
    assert devices.set_numerics() is False
    assert switches == [("tf32", False)]


class Parsed(Exception):
    """Raised with the arguments a script parsed, before it runs."""


PARSE_KNOWN_ARGS = argparse.ArgumentParser.parse_known_args


def _parse(script, argv, monkeypatch):
    """The arguments `bin/<script>.py` parses from `argv`, caught before it runs."""
    def capture(self, args=None, namespace=None):
        raise Parsed(PARSE_KNOWN_ARGS(self, args, namespace)[0])

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    spec = importlib.util.spec_from_file_location(f"bin_{script}", os.path.join(ROOT, "bin", f"{script}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Parsed) as parsed:
        module.main(argv)
    return parsed.value.args[0]


@pytest.mark.parametrize("script, argv", [
    ("elmo", ["in.txt", "out.hdf5", "--model", "m"]),
    ("dump_bilm_embeddings", ["--dataset_file", "d", "--model", "m", "--outfile", "o"]),
    ("dump_token_embeddings", ["--vocab_file", "v", "--options_file", "o", "--weight_file", "w", "--outfile", "x"]),
    ("run_test", ["--test_prefix", "t", "--vocab_file", "v", "--save_dir", "s"]),
    ("train_elmo", ["--train_prefix", "t", "--vocab_file", "v", "--save_dir", "s"]),
    ("restart", ["--train_prefix", "t", "--vocab_file", "v", "--save_dir", "s"]),
])
def test_the_scripts_that_run_float32_models_take_tf32(script, argv, monkeypatch):
    assert _parse(script, argv, monkeypatch).tf32 is False
    assert _parse(script, argv + ["--tf32"], monkeypatch).tf32 is True


def test_train_elmo_names_its_devices_and_warns_of_a_gpu_it_does_not_see(fake_gpus, switches, monkeypatch,
                                                                         capsys):
    import bilm.commands.training_arguments as training_arguments

    result = {"step": 1, "steps_taken": 1, "finished": True, "n_epochs": 1, "checkpoint": "s/model.ckpt-1"}
    monkeypatch.setattr(training_arguments, "train_from_files", lambda *a, **k: result)
    spec = importlib.util.spec_from_file_location("bin_train_elmo", os.path.join(ROOT, "bin", "train_elmo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fake_gpus(0)
    module.main(["--train_prefix", "t", "--vocab_file", "v", "--save_dir", "s", "--n_gpus", "1"])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "bilm: running on CPU (no GPU visible to TensorFlow)"
    assert err[1].startswith("Warning: --n_gpus 1 asks for a GPU, but TensorFlow sees none and runs on the CPU")
    fake_gpus(1)
    module.main(["--train_prefix", "t", "--vocab_file", "v", "--save_dir", "s", "--tf32"])
    assert capsys.readouterr().err.splitlines() == [
        "bilm: running on GPU:0 (NVIDIA H100 80GB HBM3, compute capability 9.0), CPU"]
    assert switches == [("tf32", False), ("tf32", True), ("determinism",)]
    # --nondeterministic leaves the GPU's deterministic programs off, and the restart it names keeps it so.
    switches.clear()
    module.main(["--train_prefix", "t", "--vocab_file", "v", "--save_dir", "s", "--nondeterministic"])
    assert switches == [("tf32", False)]
    args = _parse("train_elmo", ["--train_prefix", "t", "--vocab_file", "v", "--save_dir", "s", "--nondeterministic"],
                  monkeypatch)
    assert args.nondeterministic is True and "--nondeterministic" in training_arguments.restart_command(args)


def test_beam_takes_tf32():
    from bilm.beam.__main__ import parse_arguments

    args, _ = parse_arguments(["--input", "x", "--output_dir", "o", "--model", "m"])
    assert args.tf32 is False
    assert parse_arguments(["--input", "x", "--output_dir", "o", "--model", "m", "--tf32"])[0].tf32 is True


@pytest.mark.slow
def test_a_script_prints_the_device_line_first_on_stderr(tmp_path, model):
    options_file, weight_file, _ = model
    (tmp_path / "in.txt").write_text("The cat sat .\n")
    result = subprocess.run(
        [sys.executable, "bin/elmo.py", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--options_file",
         options_file, "--weight_file", weight_file, "--start", "zeros"],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.splitlines()[0] == devices.describe_devices()
    assert result.stderr.splitlines()[0].startswith("bilm: running on ")
    assert "bilm: running on" not in result.stdout


DETERMINISTIC_RUNNER = """
import runpy, sys
import tensorflow as tf
from tensorflow.python.framework import config

# A GPU as set_numerics sees it (the device lists that place ops stay real): train_elmo.py turns op determinism on.
physical = tf.config.list_physical_devices
tf.config.list_physical_devices = lambda kind=None: (
    [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")] if kind == "GPU" else physical(kind))
main = runpy.run_path(sys.argv[1])["main"]
for save_dir in sys.argv[2:4]:
    main([*sys.argv[4:], "--save_dir", save_dir])
assert config.is_op_determinism_enabled()
"""


@pytest.mark.slow
def test_training_under_op_determinism_runs_and_repeats_bit_for_bit(tmp_path):
    """What train_elmo.py does on a GPU, on this CPU: every random op has its seed, and --seed repeats the run."""
    corpus = write_corpus(tmp_path, n_train=60, n_heldout=10)
    options = tiny_options(dropout=0.1)
    del options["n_train_tokens"]
    (tmp_path / "options.json").write_text(json.dumps(options))
    (tmp_path / "runner.py").write_text(DETERMINISTIC_RUNNER)
    runs = [str(tmp_path / "first"), str(tmp_path / "second")]
    result = warm_python.run(
        [sys.executable, str(tmp_path / "runner.py"), os.path.join(ROOT, "bin", "train_elmo.py"), *runs,
         "--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"], "--options_file",
         str(tmp_path / "options.json"), "--heldout_prefix", corpus["heldout"], "--batch_size", "4",
         "--max_steps", "3", "--seed", "1"],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = (run_checkpoint.read_arrays(run_checkpoint.read_meta(run)["path"]) for run in runs)
    assert first and sorted(first) == sorted(second)
    assert all(np.array_equal(first[name], second[name]) for name in first)


@pytest.mark.parametrize("flags, expected", [
    (None, "--xla_gpu_deterministic_ops=true"),
    ("", "--xla_gpu_deterministic_ops=true"),
    (" --xla_dump_to=/tmp/d ", "--xla_dump_to=/tmp/d --xla_gpu_deterministic_ops=true"),
    ("--xla_gpu_deterministic_ops=false", "--xla_gpu_deterministic_ops=false"),  # the user's word stands
    ("--xla_gpu_deterministic_ops", "--xla_gpu_deterministic_ops"),
    ("--xla_gpu_deterministic_ops_x=1", "--xla_gpu_deterministic_ops_x=1 --xla_gpu_deterministic_ops=true"),
])
def test_deterministic_xla_flags_add_xlas_switch_unless_the_flags_say_either_way(flags, expected):
    assert jax_devices.deterministic_xla_flags(flags) == expected


@pytest.mark.parametrize("flags, expected", [
    (None, None), ("--xla_dump_to=/tmp/d", None), ("--xla_gpu_deterministic_ops_x=true", None),
    ("--xla_gpu_deterministic_ops", True), ("--xla_gpu_deterministic_ops=True", True),
    ("--xla_gpu_deterministic_ops=0", False), ("--xla_gpu_deterministic_ops=FALSE --xla_dump_to=/d", False),
    ("--xla_gpu_deterministic_ops=false --xla_gpu_deterministic_ops=true", True),  # the last mention counts
])
def test_the_users_word_on_the_flag_is_read_from_xla_flags(flags, expected):
    assert jax_devices.xla_flag_setting(flags) is expected


@pytest.mark.parametrize("version, expected", [
    ("0.9.2", (0, 9)), ("0.10.0.dev20260101", (0, 10)), ("0.8", (0, 8)), ("1.0rc1", (1, 0)), ("0", (0, 0))])
def test_a_jax_version_reads_as_its_major_and_minor(version, expected):
    assert jax_devices.jax_version_tuple(version) == expected


JAX_NUMERICS = """
import os, sys
import jax
from bilm.commands import set_numerics
print(set_numerics(tf32=True), jax.config.jax_default_matmul_precision, os.environ.get("XLA_FLAGS"))
print(set_numerics(deterministic=True), jax.config.jax_default_matmul_precision, os.environ.get("XLA_FLAGS"))
print(float(jax.numpy.ones(3).sum()), "tensorflow" in sys.modules)
"""


@pytest.mark.slow
def test_on_jax_set_numerics_sets_the_matmul_precision_and_asks_xla_for_deterministic_programs():
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    done = warm_python.run([sys.executable, "-c", JAX_NUMERICS], env={**env, "KERAS_BACKEND": "jax"},
                           capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # Determinism only where asked; on the CPU it reports no GPU programs turned deterministic, and XLA accepts
    # the flag (an unknown one would end the process when JAX starts).
    assert done.stdout.splitlines() == ["False tensorfloat32 None",
                                        "False highest --xla_gpu_deterministic_ops=true",
                                        "3.0 False"], done.stdout + done.stderr[-2000:]


def test_a_keras_backend_without_a_folder_in_bilm_is_one_clear_error(monkeypatch):
    import bilm.backend

    monkeypatch.setattr(bilm.backend, "configured_backend", lambda: "openvino")
    with pytest.raises(UserError, match=r"^Keras runs on openvino \(KERAS_BACKEND=openvino\), which bilm does not run "
                                        r"on; set KERAS_BACKEND to tensorflow, jax or torch"):
        devices.describe_devices()
