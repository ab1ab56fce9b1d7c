"""PyTorch weight files written without PyTorch, the way `torch.save` lays them out, for the tests.

`save_state_dict(arrays, path, layout)` pickles `{name: array}` with the
standard library as torch pickles a state dict: an `OrderedDict` (with its
`_metadata` attribute) of `torch._utils._rebuild_tensor_v2(storage,
offset, size, stride, requires_grad, OrderedDict())` calls, each storage a
persistent id `("storage", torch.FloatStorage, key, "cpu", numel[, None])`,
in the legacy layout (magic number, protocol version, system facts, the
dict, the storage keys, then each storage's count and bytes) or the zip
layout (`<archive>/data.pkl`, `<archive>/data/<key>`, `byteorder`,
`version`). `pickle_bytes` pickles any object with those globals, for files
that should be refused.

The globals are written by name: stand-in modules `torch` and
`torch._utils` exist in `sys.modules` only while a file is written.
"""
import collections
import io
import pickle
import struct
import sys
import types
import zipfile
from unittest import mock

import numpy as np

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
STORAGE_TYPES = {np.dtype("float32"): "FloatStorage", np.dtype("float64"): "DoubleStorage",
                 np.dtype("float16"): "HalfStorage", np.dtype("int64"): "LongStorage"}


def _stand_ins():
    """Modules named `torch` and `torch._utils` holding what a state dict's pickle names."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise AssertionError("a stand-in, only pickled by name")

    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    for name in set(STORAGE_TYPES.values()):
        setattr(torch, name, type(name, (), {"__module__": "torch"}))
    torch._utils = utils
    return {"torch": torch, "torch._utils": utils}


class Storage:
    """One storage: the flat array behind one or more tensors."""

    def __init__(self, key, flat):
        self.key, self.flat = key, np.array(flat, order="C").ravel()


class Tensor:
    """A tensor as torch pickles it: a view (`offset`, `size`, `stride` in elements) of a `Storage`."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    @classmethod
    def of(cls, array, key):
        array = np.array(array, order="C")
        strides = tuple(s // array.itemsize for s in array.strides)
        return cls(Storage(key, array), 0, array.shape, strides)

    def __reduce_ex__(self, protocol):
        rebuild = sys.modules["torch._utils"]._rebuild_tensor_v2
        return rebuild, (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict())


def state_dict(arrays):
    """`{name: Tensor}` as an `OrderedDict` with torch's `_metadata` attribute."""
    tensors = collections.OrderedDict(
        (name, value if isinstance(value, Tensor) else Tensor.of(value, str(i)))
        for i, (name, value) in enumerate(arrays.items()))
    tensors._metadata = collections.OrderedDict({"": {"version": 1}})
    return tensors


def _pickler(buffer, legacy, storages):
    modules = sys.modules

    def persistent_id(obj):
        if not isinstance(obj, Storage):
            return None
        storages.setdefault(obj.key, obj)
        storage_type = getattr(modules["torch"], STORAGE_TYPES[obj.flat.dtype])
        pid = ("storage", storage_type, obj.key, "cpu", obj.flat.size)
        return pid + (None,) if legacy else pid

    pickler = pickle.Pickler(buffer, protocol=2)
    pickler.persistent_id = persistent_id
    return pickler


def pickle_bytes(obj, layout="legacy"):
    """`obj` written as `torch.save` would write it (tensors inside as `Tensor`s), as bytes."""
    buffer, storages = io.BytesIO(), {}
    with mock.patch.dict(sys.modules, _stand_ins()):
        if layout == "legacy":
            for header in (MAGIC_NUMBER, PROTOCOL_VERSION,
                           {"protocol_version": PROTOCOL_VERSION, "little_endian": True,
                            "type_sizes": {"short": 2, "int": 4, "long": 8}}):
                pickle.dump(header, buffer, protocol=2)
            _pickler(buffer, True, storages).dump(obj)
            keys = sorted(storages)
            pickle.dump(keys, buffer, protocol=2)
            for key in keys:
                flat = storages[key].flat
                buffer.write(struct.pack("<q", flat.size) + flat.astype(flat.dtype.newbyteorder("<")).tobytes())
            return buffer.getvalue()
        data = io.BytesIO()
        _pickler(data, False, storages).dump(obj)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", data.getvalue())
        archive.writestr("archive/byteorder", "little")
        for key in sorted(storages):
            archive.writestr(f"archive/data/{key}", storages[key].flat.astype("<" + storages[key].flat.dtype.str[1:])
                             .tobytes())
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


def save_state_dict(arrays, path, layout="legacy"):
    """Writes `{name: array or Tensor}` to `path` as torch saves a state dict (`layout`: "legacy" or "zip")."""
    with open(path, "wb") as f:
        f.write(pickle_bytes(state_dict(arrays), layout))
    return path
