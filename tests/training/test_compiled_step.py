"""The training step compiled with XLA (the training key `jit_compile`) equals the step uncompiled."""
import argparse
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import warm_python
from bilm.commands.training_arguments import add_training_arguments, restart_command
from bilm.optimizers import make_optimizer
from bilm.options import OptionsError, load_options
from bilm.training.config.settings import training_settings
from bilm.training.tensorflow import train_step
from bilm.training.tensorflow.train_step import TrainStep, compiles_whole_step
from bilm.training.tensorflow.training_lm import TrainingLM
from helpers import TESTS
from training_helpers import MAX_CHARS, tiny_options

ROWS, STEPS = 16, 5
REQUESTS = [0.0, 1.0]  # the loop's stop and save flags, which a step passes on


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n):
        batch = {key: tf.constant(rng.integers(0, 261, size=(ROWS, STEPS, MAX_CHARS)), tf.int32)
                 for key in ("token_characters", "token_characters_reverse")}
        batch.update({key: tf.constant(rng.integers(0, 40, size=(ROWS, STEPS)), tf.int32)
                      for key in ("next_token_id", "next_token_id_reverse")})
        batches.append(batch)
    return batches


def _steps_both_ways(strategy=None, **training):
    """`{jit_compile: (outputs of each step, {name: array} after them)}`: the same two steps from the same
    weights, optimizer state and LSTM states, uncompiled and compiled (whole with one replica; each
    replica's forward and backward pass with several)."""
    strategy = strategy or tf.distribute.get_strategy()
    keras.utils.set_random_seed(3)  # the weights drawn, whichever tests ran before in this process
    options = tiny_options(n_tokens_vocab=50, n_negative_samples_batch=16,
                           batch_size=ROWS // strategy.num_replicas_in_sync, **training)
    _, settings = training_settings(options)
    with strategy.scope():
        lm = TrainingLM(load_options(options), settings)
        optimizer = make_optimizer(settings, lm.trainable_variables())
        states = {key: tf.Variable(tf.zeros([ROWS, size]), name=key) for key, _, size in lm.state_keys}
    variables = {**{f"model/{k}": v for k, v in lm.trainable_variables().items()},
                 **{f"optimizer/{k}": v for k, v in optimizer.accumulators.items()},
                 **{f"state/{k}": v for k, v in states.items()}}
    start = {name: v.numpy() for name, v in variables.items()}
    results = {}
    for jit_compile in (False, True):
        for name, variable in variables.items():
            variable.assign(start[name])
        _, settings = training_settings({**options, "jit_compile": jit_compile})
        step = TrainStep(lm, optimizer, states, strategy, settings, seed=3)
        assert step.jit_compile is jit_compile
        outputs = [{k: v.numpy() for k, v in step(batch, i, REQUESTS).items()} for i, batch in enumerate(_batches(2))]
        results[jit_compile] = outputs, {name: v.numpy() for name, v in variables.items()}
    if step.compiles_whole:
        function = step.function.get_concrete_function(
            _batches(1)[0], tf.constant(0, tf.int64), tf.constant(REQUESTS))
        assert function.function_def.attr["_XlaMustCompile"].b  # one XLA program, or an error
    return results


def _assert_the_same_steps(results):
    (plain_outputs, plain), (compiled_outputs, compiled) = results[False], results[True]
    for got, want in zip(compiled_outputs, plain_outputs, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
    for name, want in plain.items():
        np.testing.assert_allclose(compiled[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_array_equal(compiled_outputs[1]["requests"], REQUESTS)
    assert np.abs(plain["state/forward_1_h"]).max() > 1e-3  # states carried, not zeros


@pytest.mark.parametrize("optimizer, learning_rate, dropout", [
    ("adagrad", 0.2, 0.3), pytest.param("adam", 0.002, 0.0, marks=pytest.mark.slow)])
@pytest.mark.slow
def test_the_step_compiled_with_xla_equals_the_step_uncompiled(optimizer, learning_rate, dropout):
    # Sampled softmax (the negatives drawn under XLA as without it), dropout (the same masks), deduplicated
    # sparse rows, clipping, the update and the carried LSTM states: two steps, the second from the states
    # the first left.
    results = _steps_both_ways(optimizer=optimizer, learning_rate=learning_rate, dropout=dropout,
                               all_clip_norm_val=0.5)
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
    assert compiles_whole_step("auto") is train_step.COMPILED_ON_CPU  # this machine has no GPU
    with tf.device("/device:GPU:0"):
        assert compiles_whole_step("auto")
