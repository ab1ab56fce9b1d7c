"""Held-out perplexity with the full softmax: of an array step's state (`evaluate_state`, `evaluate_starts`),
of a checkpoint (`evaluate`, bilm-tf's test, and `evaluate_from_files`), and where each sentence starts.
test_jax_evaluation.py checks the figures against TensorFlow's own evaluation of the same weights."""
import math
import types

import numpy as np
import pytest
from keras import ops

from bilm.training.arrays.boundary_state_measure import measure_boundary_state
from bilm.training.arrays.evaluation import evaluate_state
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.config.settings import training_settings
from bilm.training.run import evaluation
from bilm.training.run.run_checkpoint import CheckpointError, save_checkpoint
from training_helpers import open_data, tiny_options, write_corpus

BATCH = 4
OPTIONS = tiny_options()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=20, n_heldout=12)


@pytest.fixture(scope="module")
def model():
    """`(step, state)`: the array step of OPTIONS and its initial state (a random softmax)."""
    step = ArrayTrainStep(*training_settings(OPTIONS))
    return step, step.initial_state(softmax_seed=1)


def _heldout(corpus):
    return open_data(OPTIONS, corpus, test=True)


def _random_boundary_state(step, seed):
    return {key: np.random.default_rng([seed, i]).normal(size=size).astype(np.float32)
            for i, (key, _, size) in enumerate(step.state_keys)}, 1


@pytest.mark.slow
def test_a_uniform_softmax_has_the_vocabulary_size_as_its_perplexity(corpus, model):
    step, state = model
    uniform = {**state, "softmax": {key: ops.zeros_like(value) for key, value in state["softmax"].items()}}
    for start in ("carry", "zeros"):
        metrics = evaluate_state(step, uniform, _heldout(corpus), BATCH, start=start)
        for key in ("perplexity", "forward_perplexity", "backward_perplexity"):
            assert metrics[key] == pytest.approx(OPTIONS["n_tokens_vocab"], rel=1e-5), (start, key)


def test_the_perplexity_is_the_mean_of_the_directions_over_every_batch(corpus, model):
    metrics = evaluate_state(*model, _heldout(corpus), BATCH)
    assert metrics["batches"] == sum(1 for _ in _heldout(corpus).iter_batches(BATCH, 1)) > 1
    # exp of the mean of (forward + backward) / 2 is the geometric mean of the two perplexities.
    assert metrics["perplexity"] == pytest.approx(
        math.sqrt(metrics["forward_perplexity"] * metrics["backward_perplexity"]), rel=1e-6)
    assert metrics["forward_perplexity"] != metrics["backward_perplexity"]


@pytest.mark.slow
def test_sentences_start_from_the_carried_state_zeros_or_the_boundary_state(corpus, model):
    def perplexity(start, boundary_state=None):
        return evaluate_state(*model, _heldout(corpus), BATCH, start=start, boundary_state=boundary_state)[
            "perplexity"]

    carry, zeros = perplexity("carry"), perplexity("zeros")
    assert carry != zeros
    step = model[0]
    zero_state = {key: np.zeros(size, np.float32) for key, _, size in step.state_keys}, 1
    assert perplexity("warm", zero_state) == zeros  # a zero boundary state is the zeros start
    assert perplexity("warm", _random_boundary_state(step, 1)) != zeros


@pytest.mark.parametrize("kwargs, message", [
    ({"start": "boundary"}, r"start must be one of \('carry', 'zeros', 'warm'\). Received: start='boundary'"),
    ({"start": "zeros", "unroll_steps": 2}, r"start='zeros' resets the states at each sentence start, which needs "
                                            r"unroll_steps=1. Received: unroll_steps=2"),
    ({"start": "warm"}, "start='warm' needs the model's boundary state, and it has none yet"),
])
def test_bad_arguments_are_clear_errors(corpus, model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluate_state(*model, _heldout(corpus), **{"batch_size": BATCH, **kwargs})


def test_a_text_with_fewer_sentences_than_rows_is_evaluated_one_row_per_sentence(corpus, model):
    with pytest.warns(UserWarning, match="The evaluation text has 12 sentences, fewer than the 1000 rows"):
        short = evaluate_state(*model, _heldout(corpus), batch_size=1000)
    assert short == evaluate_state(*model, _heldout(corpus), batch_size=12)


@pytest.mark.slow
def test_evaluate_reads_a_checkpoint_once_and_measures_a_boundary_state_for_warm_when_it_has_none(
        corpus, model, tmp_path, capsys, monkeypatch):
    """`evaluate` (bilm-tf's `test`) on a checkpoint file written without a boundary state (as one converted
    from TF1): each start's figure is what the checkpoint's state gives, "warm" from a boundary state measured
    on the evaluation text; several starts read the checkpoint once, and every start is checked first."""
    step, state = model
    path = save_checkpoint(tmp_path, state, 3, OPTIONS, 0)
    reads = []
    monkeypatch.setattr(evaluation.run_directory, "checkpoint_meta",
                        lambda file, read=evaluation.run_directory.checkpoint_meta: reads.append(file) or read(file))
    with pytest.raises(ValueError, match="start must be one of"):
        evaluation.evaluate(OPTIONS, path, _heldout(corpus), BATCH, start=["zeros", "boundary"])
    assert reads == []
    got = evaluation.evaluate(OPTIONS, path, _heldout(corpus), BATCH, start=("carry", "zeros", "warm"))
    assert reads == [path]
    assert f"{path} holds no boundary state; measured one at " in capsys.readouterr().out
    boundary_state = measure_boundary_state(step, state, _heldout(corpus))
    want = {start: evaluate_state(step, state, _heldout(corpus), BATCH, start=start, boundary_state=boundary_state)
            ["perplexity"] for start in ("carry", "zeros", "warm")}
    assert got == pytest.approx(want, rel=1e-6) and len(set(got.values())) == 3
    assert evaluation.evaluate(OPTIONS, path, _heldout(corpus), BATCH, verbose=0) == pytest.approx(want["carry"],
                                                                                                    rel=1e-6)
    # It reads the weights alone: a checkpoint without the optimizer's state and the LSTM states evaluates alike
    # (a large vocabulary's optimizer state is as large as its softmax), and another model's softmax is refused.
    (tmp_path / "weights").mkdir()
    weights_only = save_checkpoint(tmp_path / "weights", {key: state[key] for key in ("bilm", "non_trainable",
                                                                                      "softmax")}, 3, OPTIONS, 0)
    assert evaluation.evaluate(OPTIONS, weights_only, _heldout(corpus), BATCH, verbose=0) == pytest.approx(
        want["carry"], rel=1e-6)
    with pytest.raises(CheckpointError, match=r"another model's softmax \(W: \(23, 8\), the options' \(24, 8\)\)"):
        evaluation.evaluate({**OPTIONS, "n_tokens_vocab": 24}, weights_only, _heldout(corpus), BATCH, verbose=0)


def test_evaluate_from_files_gives_one_figure_for_a_start_and_one_per_start_for_a_list(monkeypatch, tmp_path):
    from bilm.training.run import from_files

    calls = []

    def evaluate_checkpoint(meta, options, data, batch_size, verbose, start, unroll_steps=1):
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


def test_a_checkpoint_is_evaluated_in_a_model_built_without_random_draws(monkeypatch):
    # The checkpoint sets every weight: drawing them first (on JAX, a compiled program a shape) was wasted.
    from bilm.models.functional_bilm import WEIGHTS_FOLLOW
    from bilm.training.arrays import training_run

    class Built(Exception):
        pass

    def recording_build(*args, **kwargs):
        raise Built(WEIGHTS_FOLLOW.is_on())

    monkeypatch.setattr(training_run, "ArrayTrainStep", recording_build)
    with pytest.raises(Built) as built:
        training_run.evaluate_checkpoint({"options": OPTIONS, "seed": 0, "path": "run/checkpoint.npz"}, OPTIONS,
                                         None, BATCH, 0, "carry")
    assert built.value.args == (True,)
