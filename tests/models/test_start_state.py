"""The start policy: one function decides where every stateless caller starts each sentence."""
import numpy as np
import pytest

from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.start_state import StartState, resolve_start
from bilm.options import load_options
from bilm.text.batching import Batcher
from helpers import SENTENCES, write_model


def _state(options, value):
    from bilm.models.functional_bilm import state_keys
    return {key: np.full(size, value, np.float32) for key, _, size in state_keys(options)}


@pytest.fixture
def options(tmp_path):
    options_file, _, _ = write_model(tmp_path)
    return load_options(options_file).for_prediction()


def test_start_is_resolved_and_explained(options):
    state = _state(options, 0.5)
    assert resolve_start(options, None, boundary_state=state, source="w.hdf5").start == "warm"
    assert resolve_start(options, "zeros", boundary_state=state, source="w.hdf5").start == "zeros"
    with pytest.raises(ValueError, match="start='warm' needs a boundary state, and w.hdf5 holds none.*warm_up="):
        resolve_start(options, "warm", source="w.hdf5")
    with pytest.raises(ValueError, match="start must be one of"):
        resolve_start(options, "carry", boundary_state=state, source="w.hdf5")


def test_no_state_means_zeros_with_a_note_on_how_to_warm_up(options):
    with pytest.warns(UserWarning, match="w.hdf5 holds no boundary state.*warm_up="):
        resolved = resolve_start(options, None, source="w.hdf5")
    assert resolved == StartState("zeros", None, 0)
    assert all(np.array_equal(v, np.zeros_like(v)) for v in resolved.vectors(options).values())


def test_a_state_that_does_not_fit_the_options_is_refused(options):
    state = _state(options, 1.0)
    state.pop(next(iter(state)))
    with pytest.raises(ValueError, match="boundary state does not match the model"):
        resolve_start(options, None, boundary_state=state)


@pytest.mark.slow
def test_the_state_comes_from_the_argument_the_warm_up_or_the_weight_file(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
    options = model.options
    given = _state(options, 0.25)
    assert resolve_start(options, boundary_state=given, weight_file=weight_file).vectors(options) == given
    warmed = resolve_start(options, warm_up=[" ".join(s) for s in SENTENCES if s] * 3, network=model.network)
    assert warmed.start == "warm" and warmed.n_starts > 0
    # What the model's own warm_up computes is the same function's result.
    model.warm_up([" ".join(s) for s in SENTENCES if s] * 3)
    for key, value in warmed.boundary_state.items():
        np.testing.assert_allclose(model.boundary_state[key], value)
    ids = Batcher(None, 7).batch_sentences([["a", "b"]])
    assert np.abs(model(ids, start="warm")["lm_embeddings"].numpy()
                  - model(ids, start="zeros")["lm_embeddings"].numpy()).max() > 1e-4


def test_a_warm_up_file_that_is_not_there_is_named_before_any_work(options, tmp_path):
    with pytest.raises(ValueError, match=r"warm_up text .*nope.txt: not found\. Give a text file .*--warm_up FILE"):
        resolve_start(options, warm_up=str(tmp_path / "nope.txt"), network=None)
    with pytest.raises(ValueError, match=r"warm_up text .*: is a directory\."):
        resolve_start(options, warm_up=tmp_path, network=None)
