"""evaluate_lm and evaluate (bilm-tf's test): held-out perplexity with the full softmax, and where each
sentence starts."""
import math
import types

import pytest
import tensorflow as tf

from bilm.training.config.settings import training_settings
from bilm.training.tensorflow import evaluation
from bilm.training.tensorflow.evaluation import evaluate_lm
from bilm.training.tensorflow.tf_dataset import make_tf_dataset
from bilm.training.tensorflow.training_lm import TrainingLM
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


@pytest.mark.slow
def test_a_uniform_softmax_has_the_vocabulary_size_as_its_perplexity(corpus, lm):
    weights = lm.softmax_weights.numpy()
    lm.softmax_weights.assign(tf.zeros_like(weights))
    try:
        for start in ("carry", "zeros"):
            metrics = evaluate_lm(lm, _heldout(corpus), BATCH, start=start)
            for key in ("perplexity", "forward_perplexity", "backward_perplexity"):
                assert metrics[key] == pytest.approx(OPTIONS["n_tokens_vocab"], rel=1e-5), (start, key)
    finally:
        lm.softmax_weights.assign(weights)


def test_the_perplexity_is_the_mean_of_the_directions_over_every_batch(corpus, lm):
    metrics = evaluate_lm(lm, _heldout(corpus), BATCH)
    assert metrics["batches"] == sum(1 for _ in make_tf_dataset(_heldout(corpus), BATCH, 1)) > 1
    # exp of the mean of (forward + backward) / 2 is the geometric mean of the two perplexities.
    assert metrics["perplexity"] == pytest.approx(
        math.sqrt(metrics["forward_perplexity"] * metrics["backward_perplexity"]), rel=1e-6)
    assert metrics["forward_perplexity"] != metrics["backward_perplexity"]


@pytest.mark.slow
def test_sentences_start_from_the_carried_state_zeros_or_the_boundary_state(corpus, lm):
    def perplexity(start):
        return evaluate_lm(lm, _heldout(corpus), BATCH, start=start)["perplexity"]

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
])
def test_bad_arguments_are_clear_errors(corpus, lm, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluate_lm(lm, _heldout(corpus), **{"batch_size": BATCH, **kwargs})


def test_a_text_with_fewer_sentences_than_rows_is_evaluated_one_row_per_sentence(corpus, lm):
    with pytest.warns(UserWarning, match="The evaluation text has 12 sentences, fewer than the 1000 rows"):
        short = evaluate_lm(lm, _heldout(corpus), batch_size=1000)
    assert short == evaluate_lm(lm, _heldout(corpus), batch_size=12)


def test_evaluate_measures_a_boundary_state_for_warm_when_the_checkpoint_has_none(corpus, lm, monkeypatch, capsys):
    """`evaluate` loads the checkpoint, measures a boundary state on the evaluation text when "warm" needs one
    (checkpoints converted from TF1 hold none), and evaluates. Loading and measuring are stood in for:
    test_checkpoints.py and test_prediction_network.py test them, the run_test script runs them all."""
    data = _heldout(corpus)
    loaded, measured = [], []
    monkeypatch.setattr(evaluation.checkpoints, "load_training_model",
                        lambda options, ckpt_file: loaded.append((options, ckpt_file)) or lm)

    def measure(model, text):
        measured.append((model, text))
        _set_boundary_state(lm, {key: tf.fill(v.shape, 0.25) for key, v in lm.boundary_state.items()}, 9)
        return 9

    monkeypatch.setattr(evaluation, "measure_boundary_state", measure)
    zero_state = {key: tf.zeros_like(variable) for key, variable in lm.boundary_state.items()}
    try:
        carry = evaluation.evaluate(OPTIONS, "ckpt/model.ckpt-3", data, BATCH, verbose=1)
        assert loaded == [(OPTIONS, "ckpt/model.ckpt-3")] and measured == []
        assert carry == pytest.approx(evaluate_lm(lm, _heldout(corpus), BATCH)["perplexity"], rel=1e-6)
        warm = evaluation.evaluate(OPTIONS, "ckpt/model.ckpt-3", data, BATCH, verbose=1, start="warm")
        assert measured == [(lm, data)]
        assert "ckpt/model.ckpt-3 holds no boundary state; measured one at 9 sentence starts" in capsys.readouterr().out
        assert warm == pytest.approx(evaluate_lm(lm, _heldout(corpus), BATCH, start="warm")["perplexity"], rel=1e-6)
        evaluation.evaluate(OPTIONS, "ckpt/model.ckpt-3", data, BATCH, verbose=1, start="warm")
        assert len(measured) == 1  # a model with a boundary state keeps it
    finally:
        _set_boundary_state(lm, zero_state, 0)


def test_evaluate_loads_the_checkpoint_once_for_several_starts(corpus, lm, monkeypatch):
    """A list of starts: one load, one measure for "warm", and each start's figure as it gives it alone."""
    loaded, measured = [], []
    monkeypatch.setattr(evaluation.checkpoints, "load_training_model",
                        lambda options, ckpt_file: loaded.append(ckpt_file) or lm)

    def measure(model, text):
        measured.append(text)
        _set_boundary_state(lm, {key: tf.fill(v.shape, 0.25) for key, v in lm.boundary_state.items()}, 9)
        return 9

    monkeypatch.setattr(evaluation, "measure_boundary_state", measure)
    zero_state = {key: tf.zeros_like(variable) for key, variable in lm.boundary_state.items()}
    try:
        with pytest.raises(ValueError, match="start must be one of"):  # every start checked before any work
            evaluation.evaluate(OPTIONS, "ckpt/model.ckpt-3", _heldout(corpus), BATCH, start=["zeros", "boundary"])
        assert loaded == []
        got = evaluation.evaluate(OPTIONS, "ckpt/model.ckpt-3", _heldout(corpus), BATCH, verbose=0,
                                  start=("carry", "zeros", "warm"))
        assert loaded == ["ckpt/model.ckpt-3"] and len(measured) == 1
        assert got == {start: evaluate_lm(lm, _heldout(corpus), BATCH, start=start)["perplexity"]
                       for start in ("carry", "zeros", "warm")}
        assert len(set(got.values())) == 3
    finally:
        _set_boundary_state(lm, zero_state, 0)


def test_evaluate_from_files_gives_one_figure_for_a_start_and_one_per_start_for_a_list(monkeypatch, tmp_path):
    from bilm.training.run import from_files

    calls = []

    def evaluate_checkpoint(meta, options, data, batch_size, verbose, start):
        calls.append(start)
        return {each: float(i) for i, each in enumerate(start)} if isinstance(start, tuple) else 7.5

    monkeypatch.setattr(from_files, "trainer_module", lambda: types.SimpleNamespace(
        evaluate_checkpoint=evaluate_checkpoint))
    monkeypatch.setattr(from_files.run_directory, "run_meta", lambda save_dir: {"options": OPTIONS})
    monkeypatch.setattr(from_files.run_directory, "check_vocabulary", lambda meta, vocab: None)
    monkeypatch.setattr(from_files, "load_training_data", lambda *args, **kwargs: ("data", "vocab"))
    assert from_files.evaluate_from_files("text*", "vocab.txt", "run", verbose=0, start="zeros") == 7.5
    assert from_files.evaluate_from_files("text*", "vocab.txt", "run", verbose=0, start=["zeros", "warm"]) == {
        "zeros": 0.0, "warm": 1.0}
    assert calls == ["zeros", ("zeros", "warm")]
    monkeypatch.setattr(from_files.run_directory, "run_meta", lambda save_dir: calls.append("read") or {})
    with pytest.raises(ValueError, match="start must be one of"):  # every start checked before any work
        from_files.evaluate_from_files("text*", "vocab.txt", "run", start=("warm", "boundary"))
    assert calls == ["zeros", ("zeros", "warm")]


def test_the_array_evaluation_compiles_one_function_for_both_fixed_starts(monkeypatch):
    """JAX's and PyTorch's evaluation, with its compiled losses stood in for (test_jax_evaluation.py checks the
    figures against TensorFlow's): the fixed starts share one function, given each its own start states, and
    each start's figures are the ones it gives alone."""
    import numpy as np
    from keras import ops

    from bilm.training.arrays import evaluation as arrays_evaluation

    compiled = []

    def losses_function(step, opening):
        compiled.append(opening)

        def losses(weights, lstm, batch, start_states):
            loss = ops.mean(ops.cast(batch["token_ids"], "float32")) + weights["softmax"]
            if start_states is not None:
                loss = loss + ops.sum(start_states["forward_c"])
            return loss, {"forward": loss}, lstm

        return losses

    monkeypatch.setattr(arrays_evaluation, "_losses_function", losses_function)
    step = types.SimpleNamespace(
        batch_keys=lambda: ["token_ids", "next_token_id"], directions=("forward",), state_keys=[("forward_c", "", 2)],
        placement=types.SimpleNamespace(first=lambda tree: tree), settings=types.SimpleNamespace(batch_size=2))
    batches = [{"token_ids": np.array([[1], [5]]), "next_token_id": np.array([[5], [6]])},
               {"token_ids": np.array([[5], [1]]), "next_token_id": np.array([[6], [5]])}]
    data = types.SimpleNamespace(vocab=types.SimpleNamespace(bos=1), iter_batches=lambda rows, steps: iter(batches))
    state = {"bilm": [], "non_trainable": [], "softmax": 0.5}
    boundary_state = ({"forward_c": np.array([0.25, 0.5], "float32")}, 3)
    starts = ("carry", "zeros", "warm")
    together = arrays_evaluation.evaluate_starts(step, state, data, starts, boundary_state=boundary_state)
    assert compiled == [None, {"forward": 1}]
    assert together == {start: arrays_evaluation.evaluate_state(step, state, data, start=start,
                                                                boundary_state=boundary_state)
                        for start in starts}
    assert together["warm"]["perplexity"] == pytest.approx(math.exp(3 + 0.5 + 0.75))


def test_test_is_a_deprecated_alias_of_evaluate_and_neither_is_collected_by_pytest(monkeypatch):
    import bilm.training

    calls = []
    monkeypatch.setattr(evaluation, "evaluate", lambda *args, **kwargs: calls.append((args, kwargs)) or 7.5)
    # bilm-tf's call: test(options, ckpt_file, data, batch_size)
    with pytest.warns(DeprecationWarning, match=r"bilm.training.test is deprecated; use bilm.training.evaluate"):
        assert bilm.training.test(OPTIONS, "ckpt/model.ckpt-3", "data", 8, start="zeros") == 7.5
    assert calls == [((OPTIONS, "ckpt/model.ckpt-3", "data", 8), {"start": "zeros"})]
    assert bilm.training.test.__test__ is False and bilm.training.test_from_files.__test__ is False


@pytest.mark.parametrize("module, name, evaluate", [
    ("bilm.training.tensorflow.checkpoints", "TrainingLM",
     lambda module: module.load_training_model(OPTIONS, "checkpoint")),
    ("bilm.training.arrays.training_run", "ArrayTrainStep",
     lambda module: module.evaluate_checkpoint({"options": OPTIONS, "seed": 0, "path": "run/checkpoint.npz"},
                                               OPTIONS, None, BATCH, 0, "carry")),
], ids=["tensorflow", "jax and pytorch"])
def test_a_checkpoint_is_evaluated_in_a_model_built_without_random_draws(monkeypatch, module, name, evaluate):
    # The checkpoint sets every weight: drawing them first (on JAX, a compiled program a shape) was wasted.
    import importlib

    from bilm.models.functional_bilm import WEIGHTS_FOLLOW

    class Built(Exception):
        pass

    def recording_build(*args, **kwargs):
        raise Built(WEIGHTS_FOLLOW.is_on())

    module = importlib.import_module(module)
    monkeypatch.setattr(module, name, recording_build)
    with pytest.raises(Built) as built:
        evaluate(module)
    assert built.value.args == (True,)
