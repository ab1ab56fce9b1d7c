"""evaluate and test: held-out perplexity with the full softmax, and where each sentence starts."""
import math

import numpy as np
import pytest
import tensorflow as tf

from bilm.training import evaluation  # not its `test` itself, which pytest would collect
from bilm.training.checkpoints import build_checkpoint, load_training_model
from bilm.training.evaluation import evaluate
from bilm.training.settings import training_settings
from bilm.training.tf_dataset import make_tf_dataset
from bilm.training.training_lm import TrainingLM
from training_helpers import open_data, tiny_options, write_corpus

BATCH = 4
OPTIONS = tiny_options()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=20, n_heldout=12)


@pytest.fixture(scope="module")
def lm():
    """A random model without a boundary state (tests that set one put it back)."""
    lm = TrainingLM(*training_settings(OPTIONS))
    lm.softmax_weights.assign(tf.random.stateless_normal(lm.softmax_weights.shape, seed=[0, 0]))
    return lm


def _heldout(corpus):
    return open_data(OPTIONS, corpus, test=True)


def _set_boundary_state(lm, state, n_starts):
    for key, variable in lm.boundary_state.items():
        variable.assign(state[key])
    lm.n_boundary_starts.assign(n_starts)


def test_a_uniform_softmax_has_the_vocabulary_size_as_its_perplexity(corpus, lm):
    weights = lm.softmax_weights.numpy()
    lm.softmax_weights.assign(tf.zeros_like(weights))
    try:
        for start in ("carry", "zeros"):
            metrics = evaluate(lm, _heldout(corpus), BATCH, start=start)
            for key in ("perplexity", "forward_perplexity", "backward_perplexity"):
                assert metrics[key] == pytest.approx(OPTIONS["n_tokens_vocab"], rel=1e-5), (start, key)
    finally:
        lm.softmax_weights.assign(weights)


def test_the_perplexity_is_the_mean_of_the_directions_over_every_batch(corpus, lm):
    metrics = evaluate(lm, _heldout(corpus), BATCH)
    assert metrics["batches"] == sum(1 for _ in make_tf_dataset(_heldout(corpus), BATCH, 1)) > 1
    # exp of the mean of (forward + backward) / 2 is the geometric mean of the two perplexities.
    assert metrics["perplexity"] == pytest.approx(
        math.sqrt(metrics["forward_perplexity"] * metrics["backward_perplexity"]), rel=1e-6)
    assert metrics["forward_perplexity"] != metrics["backward_perplexity"]


def test_sentences_start_from_the_carried_state_zeros_or_the_boundary_state(corpus, lm):
    def perplexity(start):
        return evaluate(lm, _heldout(corpus), BATCH, start=start)["perplexity"]

    carry, zeros = perplexity("carry"), perplexity("zeros")
    assert carry != zeros
    zero_state = {key: tf.zeros_like(variable) for key, variable in lm.boundary_state.items()}
    try:
        _set_boundary_state(lm, zero_state, 1)
        assert perplexity("warm") == zeros  # a zero boundary state is the zeros start
        _set_boundary_state(lm, {key: tf.random.stateless_normal(state.shape, seed=[i, 1])
                                 for i, (key, state) in enumerate(zero_state.items())}, 1)
        assert perplexity("warm") != zeros
    finally:
        _set_boundary_state(lm, zero_state, 0)


@pytest.mark.parametrize("kwargs, message", [
    ({"start": "boundary"}, r"start must be one of \('carry', 'zeros', 'warm'\). Received: start='boundary'"),
    ({"start": "zeros", "unroll_steps": 2}, r"start='zeros' resets the states at each sentence start, which needs "
                                            r"unroll_steps=1. Received: unroll_steps=2"),
    ({"start": "warm"}, "start='warm' needs the model's boundary state, and it has none yet"),
    ({"batch_size": 1000}, "The evaluation data gave no complete batch of 1000 rows x 1 steps"),
])
def test_bad_arguments_are_clear_errors(corpus, lm, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluate(lm, _heldout(corpus), **{"batch_size": BATCH, **kwargs})


def test_a_checkpoint_without_a_boundary_state_gets_one_measured_for_warm(corpus, lm, tmp_path, capsys):
    checkpoint = build_checkpoint(lm).write(str(tmp_path / "model.ckpt-0"))
    warm = evaluation.test(OPTIONS, checkpoint, _heldout(corpus), BATCH, verbose=1, start="warm")
    assert f"{checkpoint} holds no boundary state; measured one at " in capsys.readouterr().out
    assert int(load_training_model(OPTIONS, checkpoint).n_boundary_starts.numpy()) == 0  # the file is unchanged
    assert np.isfinite(warm) and warm != evaluate(lm, _heldout(corpus), BATCH, start="zeros")["perplexity"]
