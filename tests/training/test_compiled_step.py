"""The training step compiled with XLA (the training key `jit_compile`) equals the step uncompiled."""
import argparse
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import warm_python
from bilm.backend.tensorflow import training_ops
from bilm.backend.tensorflow.training_ops import Placement, compiles_whole_step
from bilm.commands.training_arguments import add_training_arguments, restart_command
from bilm.options import OptionsError, load_options
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.config.settings import training_settings
from bilm.utils.python_random import seeded_python_random
from helpers import TESTS
from training_helpers import MAX_CHARS, tiny_options

ROWS, STEPS = 16, 5


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n):
        batch = {key: rng.integers(0, 261, size=(ROWS, STEPS, MAX_CHARS)).astype(np.int32)
                 for key in ("token_characters", "token_characters_reverse")}
        batch.update({key: rng.integers(0, 40, size=(ROWS, STEPS)).astype(np.int32)
                      for key in ("next_token_id", "next_token_id_reverse")})
        batches.append(batch)
    return batches


def _steps_both_ways(strategy=None, **training):
    """`{jit_compile: (outputs of each step, [array of the state] after them)}`: the same two steps of the array
    step on TensorFlow from the same start, uncompiled and compiled (whole with one replica; each replica's
    forward and backward pass with a strategy's several)."""
    n_replicas = 1 if strategy is None else strategy.num_replicas_in_sync
    options = tiny_options(n_tokens_vocab=50, n_negative_samples_batch=16, batch_size=ROWS // n_replicas,
                           **training)
    results = {}
    for jit_compile in (False, True):
        _, settings = training_settings({**options, "jit_compile": jit_compile})
        with seeded_python_random(3):  # the same initial weights both ways
            step = ArrayTrainStep(load_options(options), settings, seed=3,
                                  placement=None if strategy is None else Placement(strategy=strategy))
        state = step.initial_state(softmax_seed=3)
        outputs = []
        for i, batch in enumerate(_batches(2)):
            state, metrics = step(state, batch, i)
            outputs.append({k: np.asarray(v) for k, v in metrics.items()})
        results[jit_compile] = outputs, [tf.convert_to_tensor(v).numpy() for v in keras.tree.flatten(state)]
        if strategy is None:  # one XLA program with jit_compile, or an error; none without
            (compiled,) = step._steps.values()
            program = compiled.function.get_concrete_function(
                state, step.placement.rows(_batches(1)[0]), tf.constant(0, tf.int32))
            assert program.function_def.attr["_XlaMustCompile"].b is jit_compile
    assert np.abs(np.asarray(state["lstm"]["forward_1_h"])).max() > 1e-3  # states carried, not zeros
    return results


def _assert_the_same_steps(results):
    (plain_outputs, plain), (compiled_outputs, compiled) = results[False], results[True]
    for got, want in zip(compiled_outputs, plain_outputs, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
    assert len(compiled) == len(plain)
    for i, (got, want) in enumerate(zip(compiled, plain)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"state array {i}")


@pytest.mark.slow
def test_the_step_compiled_with_xla_equals_the_step_uncompiled():
    # Sampled softmax (the negatives drawn under XLA as without it), dropout (the same masks), deduplicated
    # sparse rows, clipping, the update and the carried LSTM states: two steps, the second from the states
    # the first left. (Adam's update reads and writes its slots' rows as Adagrad's does, through the same
    # primitives; JAX compiles it with XLA in every step, equal to TensorFlow's: test_jax_train_step.py.)
    results = _steps_both_ways(optimizer="adagrad", learning_rate=0.2, dropout=0.3, all_clip_norm_val=0.5)
    assert min(outputs["norm"] for outputs in results[False][0]) > 0.5  # clipped
    _assert_the_same_steps(results)


REPLICAS = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/training"]
import test_compiled_step as T
T._assert_the_same_steps(T._steps_both_ways(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])))
print("SAME")
"""


@pytest.mark.slow
def test_with_two_replicas_each_replicas_compiled_gradients_give_the_same_step():
    # Logical devices are process-wide: a process of its own.
    result = warm_python.run([sys.executable, "-c", REPLICAS, TESTS], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "SAME" in result.stdout, result.stderr[-3000:]


def test_jit_compile_is_one_option_whose_auto_compiles_on_an_accelerator():
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    required = ["--train_prefix", "t", "--vocab_file", "v", "--save_dir", "s"]
    assert parser.parse_args(required).jit_compile is None  # the options file's, else "auto"
    assert [parser.parse_args(required + ["--jit_compile", value]).jit_compile
            for value in ("auto", "true", "False")] == ["auto", True, False]
    with pytest.raises(SystemExit):
        parser.parse_args(required + ["--jit_compile", "yes"])
    again = restart_command(parser.parse_args(required + ["--jit_compile", "false"])).split()
    assert parser.parse_args(again[again.index("--train_prefix"):]).jit_compile is False  # a restart keeps it
    assert training_settings(tiny_options())[1].jit_compile == "auto"
    with pytest.raises(OptionsError, match="training key 'jit_compile' must be \"auto\", true or false, got \"yes\""):
        training_settings(tiny_options(jit_compile="yes"))

    assert compiles_whole_step(True) and not compiles_whole_step(False)
    assert compiles_whole_step("auto") is training_ops.COMPILED_ON_CPU  # this machine has no GPU
    with tf.device("/device:GPU:0"):
        assert compiles_whole_step("auto")
