"""The original HDF5 layout: bit-identical round trips and errors that name the dataset."""
import h5py
import numpy as np
import pytest

import numpy_reference as R
from bilm.io.formats.weight_file import (
    WeightFileError,
    load_bilm_weights,
    read_boundary_state,
    save_bilm_weights,
    weight_table,
    write_boundary_state,
    write_datasets,
)
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.functional_bilm import build_bilm
from bilm.options import load_options
from bilm.text.batching import Batcher
from helpers import write_model

MAX_CHARS = 7


@pytest.mark.parametrize("config", [
    dict(), dict(n_highway=2, filters=((1, 2), (2, 4))), dict(lstm_dim=6, projection_dim=6, n_layers=1),
    dict(n_characters=261),
])
def test_round_trip_is_bit_identical(tmp_path, config):
    options_file, weight_file, options = write_model(tmp_path, **config)
    model = build_bilm(load_options(options_file).for_prediction())
    load_bilm_weights(model, weight_file)
    out_file = str(tmp_path / "again.hdf5")
    save_bilm_weights(model, out_file)
    original, again = R.read_weights(weight_file), R.read_weights(out_file)
    assert sorted(original) == sorted(again) == sorted(R.expected_weight_shapes(options))
    for name in original:
        assert again[name].dtype == np.float32 and again[name].shape == original[name].shape
        assert again[name].tobytes() == original[name].tobytes(), name


def test_table_names_match_the_original_layout(tmp_path):
    _, _, options = write_model(tmp_path)
    model = build_bilm(load_options(options).for_prediction())
    table = {entry.name: entry.shape for entry in weight_table(model)}
    assert table == {name: tuple(shape) for name, shape in R.expected_weight_shapes(options).items()}


def test_missing_dataset_is_named(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    with h5py.File(weight_file, "a") as f:
        del f["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"]
    with pytest.raises(WeightFileError, match=r"missing dataset 'RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B'"):
        BidirectionalLanguageModel(options_file, weight_file)


def test_wrong_shape_names_dataset_and_both_shapes(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    with h5py.File(weight_file, "a") as f:
        del f["CNN_high_0/W_carry"]
        f["CNN_high_0/W_carry"] = np.zeros((15, 14), np.float32)
    with pytest.raises(WeightFileError, match=r"'CNN_high_0/W_carry' has shape \(15, 14\), expected \(15, 15\)"):
        BidirectionalLanguageModel(options_file, weight_file)


def test_weights_of_another_configuration(tmp_path):
    options_file, _, _ = write_model(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _, other_weights, _ = write_model(other, lstm_dim=10)
    with pytest.raises(WeightFileError, match="does not match the model built from the options"):
        BidirectionalLanguageModel(options_file, other_weights)


def test_not_hdf5_and_missing_file(tmp_path):
    options_file, _, _ = write_model(tmp_path)
    bad = tmp_path / "weights.txt"
    bad.write_text("not hdf5")
    with pytest.raises(WeightFileError, match="not a readable HDF5"):
        BidirectionalLanguageModel(options_file, str(bad))
    with pytest.raises(WeightFileError, match="not found"):
        BidirectionalLanguageModel(options_file, str(tmp_path / "nope.hdf5"))


class _FailsWhenWritten:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("crash mid-write")


def test_a_crash_mid_write_leaves_no_file(tmp_path):
    target = tmp_path / "out.hdf5"
    with pytest.raises(RuntimeError, match="crash mid-write"):
        write_datasets(str(target), {"a": np.zeros(3), "b": _FailsWhenWritten()}, kind="weights")
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary one
    write_datasets(str(target), {"a": np.zeros(3)}, kind="weights")
    with h5py.File(target, "r") as f:
        assert list(f) == ["a"] and f["a"].dtype == np.float32


def test_the_state_round_trips_through_a_weight_file_beside_the_original_datasets(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    state = {f"{d}_{layer}_{part}": np.full(8 if part == "c" else 6, layer + 0.5, np.float32)
             for d in ("forward", "backward") for layer in range(2) for part in "ch"}
    assert read_boundary_state(weight_file) is None
    original = R.read_weights(weight_file)
    with h5py.File(weight_file, "a") as f:
        write_boundary_state(f, state, 1234)
    loaded, n_starts = read_boundary_state(weight_file)
    assert n_starts == 1234 and all(np.array_equal(loaded[k], state[k]) for k in state)
    # The original datasets are untouched; the state adds new names only.
    after = R.read_weights(weight_file)
    assert {k: v for k, v in after.items() if not k.startswith("boundary_state/")}.keys() == original.keys()
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False)
    assert model.start == "warm"
    ids = Batcher(None, MAX_CHARS).batch_sentences([["a", "b"]])
    warm = model(ids)["lm_embeddings"].numpy()
    zeros = model(ids, start="zeros")["lm_embeddings"].numpy()
    init_states = {(d, layer): (state[f"{name}_{layer}_c"][None], state[f"{name}_{layer}_h"][None])
                   for d, name in enumerate(("forward", "backward")) for layer in range(2)}
    reference = R.bilm_forward(R.read_weights(weight_file), R.make_options(), ids, init_states=init_states)
    np.testing.assert_allclose(warm, reference["lm_embeddings"], atol=1e-5)
    assert np.abs(warm - zeros).max() > 1e-3
