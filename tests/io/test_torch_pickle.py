"""PyTorch state dicts read without PyTorch: both layouts, views and strides, and files that are refused."""
import collections
import os
import pickle

import numpy as np
import pytest

from bilm.errors import UserError
from bilm.io.formats.torch_pickle import TorchFileError, read_torch_state_dict
from torch_pickles import Storage, Tensor, pickle_bytes, save_state_dict, state_dict

LAYOUTS = ("legacy", "zip")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_state_dict_reads_back_in_order_with_its_dtypes(tmp_path, layout):
    rng = np.random.default_rng(0)
    arrays = {"embedding.weight": rng.normal(size=(5, 3)).astype(np.float32),
              "conv.0.weight": rng.normal(size=(4, 3, 2)).astype(np.float32),
              "bias": np.arange(4, dtype=np.float64), "steps": np.array(7, dtype=np.int64),
              "half": rng.normal(size=(2, 2)).astype(np.float16), "empty": np.zeros((0, 3), np.float32)}
    read = read_torch_state_dict(save_state_dict(arrays, tmp_path / "w.pkl", layout))
    assert list(read) == list(arrays)
    for name, array in arrays.items():
        assert read[name].dtype == array.dtype and read[name].shape == array.shape
        np.testing.assert_array_equal(read[name], array)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tensors_sharing_a_storage_with_offsets_and_strides(tmp_path, layout):
    flat = np.arange(24, dtype=np.float32)
    storage = Storage("0", flat)
    tensors = {"matrix": Tensor(storage, 0, (4, 6), (6, 1)),
               "transposed": Tensor(storage, 0, (6, 4), (1, 6)),
               "tail": Tensor(storage, 18, (2, 3), (3, 1)),
               "column": Tensor(storage, 2, (4,), (6,))}
    read = read_torch_state_dict(save_state_dict(tensors, tmp_path / "w.pkl", layout))
    matrix = flat.reshape(4, 6)
    np.testing.assert_array_equal(read["matrix"], matrix)
    np.testing.assert_array_equal(read["transposed"], matrix.T)
    np.testing.assert_array_equal(read["tail"], flat[18:].reshape(2, 3))
    np.testing.assert_array_equal(read["column"], matrix[:, 2])
    assert read["transposed"].flags.c_contiguous


def test_a_tensor_reaching_past_its_storage_is_refused(tmp_path):
    storage = Storage("0", np.arange(6, dtype=np.float32))
    path = save_state_dict({"w": Tensor(storage, 4, (2, 2), (2, 1))}, tmp_path / "w.pkl")
    with pytest.raises(TorchFileError, match=r"w.pkl: tensor 'w' of size \(2, 2\) reaches past its storage"):
        read_torch_state_dict(path)


class _Call:
    """Pickles as a call of `function(*args)`, by the function's name (what a malicious file does)."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_file_naming_any_other_global_is_refused_and_nothing_runs(tmp_path, layout):
    marker = tmp_path / "ran"
    payload = state_dict({"w": np.ones(2, np.float32)})
    payload["evil"] = _Call(os.system, f"touch {marker}")
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle_bytes(payload, layout))
    with pytest.raises(TorchFileError, match=r"evil.pkl names posix.system, which a file of weights never needs; "
                                             r"bilm reads only state dicts of tensors"):
        read_torch_state_dict(path)
    assert not marker.exists()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("payload, message", [
    (["not", "a", "dict"], r"holds a list, not a state dict \(a dict from parameter names to tensors"),
    (collections.OrderedDict(w=3), r"is not a state dict of tensors: 'w' holds a int"),
    ({"nested": {"w": 1.5}}, r"is not a state dict of tensors: 'nested' holds a dict"),
])
def test_anything_but_a_dict_of_tensors_is_refused(tmp_path, layout, payload, message):
    path = tmp_path / "w.pkl"
    path.write_bytes(pickle_bytes(payload, layout))
    with pytest.raises(TorchFileError, match=message) as error:
        read_torch_state_dict(path)
    assert isinstance(error.value, UserError) and str(path) in str(error.value)


def test_files_of_other_kinds_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="PyTorch weight file not found: .*missing.pkl"):
        read_torch_state_dict(tmp_path / "missing.pkl")
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps({"w": [1.0]}))
    with pytest.raises(TorchFileError, match="plain.pkl is not a PyTorch weight file: it starts neither as a zip"):
        read_torch_state_dict(plain)
    whole = pickle_bytes(state_dict({"w": np.ones(100, np.float32)}))
    truncated = tmp_path / "truncated.pkl"
    truncated.write_bytes(whole[:-50])
    with pytest.raises(TorchFileError, match="truncated.pkl is truncated or corrupt"):
        read_torch_state_dict(truncated)
    cut = tmp_path / "cut.pkl"
    cut.write_bytes(whole[:40])
    with pytest.raises(TorchFileError, match="cut.pkl is not a readable PyTorch weight file"):
        read_torch_state_dict(cut)


def test_every_pickle_of_the_legacy_layout_is_read_restricted(tmp_path):
    marker = tmp_path / "ran"
    whole = pickle_bytes(state_dict({"w": np.ones(2, np.float32)}))
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
    assert whole.startswith(magic)
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(_Call(os.system, f"touch {marker}"), protocol=2) + whole[len(magic):])
    with pytest.raises(TorchFileError, match="evil.pkl names posix.system"):
        read_torch_state_dict(path)
    assert not marker.exists()
