"""PyTorch weight files (`torch.save` of a state dict) read with the standard library and NumPy.

A state dict is a dict from parameter names to tensors. `torch.save` writes
it in one of two layouts (docs/formats.md, "PyTorch weight files"):

- the zip layout (PyTorch 1.6 and later): a zip archive whose members sit in
  one top folder: `data.pkl` (the pickled dict), `data/<key>` (the raw bytes
  of each storage), `byteorder` (`little` or `big`; little when absent);
- the legacy layout (before 1.6; ELMoForManyLangs' 2018 models): five
  pickles in a row (the magic number `0x1950a86a20f9469cfc6c`, the protocol
  version 1001, a dict of facts about the writing machine with
  `little_endian`, the pickled dict, and the list of storage keys in file
  order), then every storage of that list: its element count as an int64
  and its raw bytes, in the writer's byte order.

In both, a tensor is pickled as a call of `torch._utils._rebuild_tensor_v2(
storage, offset, size, stride, requires_grad, hooks[, metadata])`, its
storage a persistent id `("storage", torch.<Type>Storage, key, location,
numel[, view])`. The unpickler here maps exactly the globals such a file
needs (`collections.OrderedDict`, the tensor and parameter rebuilders, the
storage types) to inert stand-ins of its own and refuses every other
global: nothing named in a file is ever imported or run.
"""
import collections
import dataclasses
import os
import pickle
import struct
import zipfile
from typing import Optional, Tuple

import numpy as np

from bilm.errors import UserError

LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL_VERSION = 1001
_ZIP_LOCAL_HEADER = b"PK\x03\x04"
# Element types of the storages, by the name of torch's storage class
# (NumPy has no bfloat16: it is read as the upper halves of float32s).
BFLOAT16 = "bfloat16"
_STORAGE_DTYPES = {
    "DoubleStorage": "f8", "FloatStorage": "f4", "HalfStorage": "f2", "BFloat16Storage": BFLOAT16,
    "LongStorage": "i8", "IntStorage": "i4", "ShortStorage": "i2", "CharStorage": "i1", "ByteStorage": "u1",
    "BoolStorage": "?",
}


class TorchFileError(UserError):
    """A PyTorch weight file that cannot be read as a state dict of tensors."""


class _Inert:
    """What the unpickler builds: plain records that refuse any further state from the file."""

    def __setstate__(self, state):
        raise pickle.UnpicklingError(f"refused state for a {type(self).__name__}")


@dataclasses.dataclass(eq=False)
class _StorageType(_Inert):
    name: str


@dataclasses.dataclass(eq=False)
class _Storage(_Inert):
    """One storage: `numel` elements of `dtype`, or a view of `numel` elements at `offset` of `root`."""

    key: str
    dtype: str
    numel: int
    root: Optional["_Storage"] = None
    offset: int = 0


@dataclasses.dataclass(eq=False)
class _TensorRecord(_Inert):
    storage: _Storage
    offset: int
    size: Tuple[int, ...]
    stride: Tuple[int, ...]


class _StateDict(collections.OrderedDict):
    """`collections.OrderedDict` as the file builds it; its pickled attributes (torch's `_metadata`) are dropped."""

    def __setstate__(self, state):
        pass


def _rebuild_tensor(storage, offset, size, stride, *_):
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a tensor without a storage")
    if not (_all_ints((offset, *size, *stride)) and len(size) == len(stride)):
        raise pickle.UnpicklingError(f"a tensor of offset {offset!r}, size {size!r}, stride {stride!r}")
    return _TensorRecord(storage, offset, tuple(size), tuple(stride))


def _rebuild_parameter(data, *_):
    return data


_GLOBALS = {
    ("collections", "OrderedDict"): _StateDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in _STORAGE_DTYPES},
}


class _Unpickler(pickle.Unpickler):
    """Resolves only `_GLOBALS` (a TorchFileError naming `path` for any other); collects the storages the
    persistent ids name, by key."""

    def __init__(self, file, path):
        super().__init__(file, encoding="utf-8")
        self.path = path
        self.storages = {}

    def find_class(self, module, name):
        found = _GLOBALS.get((module, name))
        if found is None:
            raise TorchFileError(
                f"{self.path} names {module}.{name}, which a file of weights never needs; bilm reads only state "
                "dicts of tensors and runs nothing a file names, so it refuses this file.")
        return found

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and _text(pid[0]) == "storage"
                and isinstance(pid[1], _StorageType) and _all_ints(pid[4:5])):
            raise pickle.UnpicklingError(f"an unknown persistent id {pid!r}")
        key, numel, dtype = _text(pid[2]), pid[4], _STORAGE_DTYPES[pid[1].name]
        storage = self.storages.setdefault(key, _Storage(key, dtype, numel))
        view = pid[5] if len(pid) == 6 else None
        if view is None:
            return storage
        if not (isinstance(view, tuple) and len(view) == 3 and _all_ints(view[1:])):
            raise pickle.UnpicklingError(f"an unknown storage view {view!r}")
        return self.storages.setdefault(_text(view[0]), _Storage(_text(view[0]), dtype, view[2], storage, view[1]))


def _text(value):
    return value.decode("ascii") if isinstance(value, bytes) else value if isinstance(value, str) else repr(value)


def _all_ints(values):
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def read_torch_state_dict(path):
    """The tensors of a PyTorch state dict file, without PyTorch.

    Args:
        path: a file written by `torch.save(module.state_dict(), path)`, in
            the zip or the legacy layout (see the module docstring).

    Returns:
        `{parameter name: np.ndarray}` in the file's order, each array a
        contiguous copy in its stored dtype (bfloat16 as float32).

    Raises:
        FileNotFoundError: no file at `path`.
        TorchFileError: the file is neither layout, is truncated, names a
            global other than those of a state dict of tensors, or holds
            something else than a dict from names to tensors; the message
            names the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"PyTorch weight file not found: {path}")
    try:
        with open(path, "rb") as f:
            is_zip = f.read(len(_ZIP_LOCAL_HEADER)) == _ZIP_LOCAL_HEADER
            f.seek(0)
            state, read_storage = _load_zip(f, path) if is_zip else _load_legacy(f, path)
            return _tensors(state, read_storage, path)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            struct.error, zipfile.BadZipFile) as error:
        if isinstance(error, TorchFileError):
            raise
        raise TorchFileError(f"{path} is not a readable PyTorch weight file ({type(error).__name__}: {error}); "
                             "it may be truncated or corrupt.") from None


def _load_zip(f, path):
    """`(unpickled object, storage key -> bytes)` of the zip layout."""
    archive = zipfile.ZipFile(f)
    pickles = [name for name in archive.namelist() if name.endswith("data.pkl") and name.count("/") == 1]
    if len(pickles) != 1:
        raise TorchFileError(f"{path} is a zip archive, but not one that torch.save writes (one folder with "
                             f"data.pkl); it holds {archive.namelist()[:10]}.")
    prefix = pickles[0][:-len("data.pkl")]
    names = set(archive.namelist())
    byteorder = archive.read(prefix + "byteorder").decode("ascii") if prefix + "byteorder" in names else "little"
    if byteorder not in ("little", "big"):
        raise TorchFileError(f"{path}: unknown byte order {byteorder!r}.")
    unpickler = _Unpickler(archive.open(pickles[0]), path)
    state = unpickler.load()
    order = "<" if byteorder == "little" else ">"

    def read_storage(storage):
        return archive.read(f"{prefix}data/{storage.key}"), order

    return state, read_storage


def _load_legacy(f, path):
    """`(unpickled object, storage key -> bytes)` of the legacy layout; every pickle read by `_Unpickler`."""
    magic = _Unpickler(f, path).load()
    if magic != LEGACY_MAGIC_NUMBER:
        raise TorchFileError(
            f"{path} is not a PyTorch weight file: it starts neither as a zip archive nor with torch's magic "
            "number (a file from an older PyTorch than 0.4, a tar archive, is not read either).")
    version = _Unpickler(f, path).load()
    if version != LEGACY_PROTOCOL_VERSION:
        raise TorchFileError(f"{path}: unknown PyTorch file protocol version {version!r}.")
    system = _Unpickler(f, path).load()
    order = "<" if not isinstance(system, dict) or system.get("little_endian", True) else ">"
    unpickler = _Unpickler(f, path)
    state = unpickler.load()
    keys = _Unpickler(f, path).load()
    if not isinstance(keys, list) or any(_text(key) not in unpickler.storages for key in keys):
        raise TorchFileError(f"{path}: the list of storages does not match the pickled tensors.")
    data = {}
    for key in keys:
        storage = unpickler.storages[_text(key)]
        (numel,) = struct.unpack(order + "q", f.read(8))
        n_bytes = numel * _numpy_dtype(storage.dtype).itemsize
        data[storage.key] = f.read(n_bytes)
        if numel != storage.numel or len(data[storage.key]) != n_bytes:
            raise TorchFileError(f"{path} is truncated or corrupt: storage {storage.key} holds "
                                 f"{len(data[storage.key])} bytes, {storage.numel} elements were announced.")

    def read_storage(storage):
        if storage.key not in data:
            raise TorchFileError(f"{path}: storage {storage.key} is not in the file.")
        return data[storage.key], order

    return state, read_storage


def _tensors(state, read_storage, path):
    """`{name: array}` for a state dict of `_TensorRecord`s."""
    if not isinstance(state, dict):
        raise TorchFileError(f"{path} holds a {type(state).__name__}, not a state dict (a dict from parameter "
                             "names to tensors, what module.state_dict() gives).")
    arrays, cache = {}, {}
    for name, record in state.items():
        if not isinstance(name, str) or not isinstance(record, _TensorRecord):
            shown = type(record).__name__ if isinstance(name, str) else f"key {name!r}"
            raise TorchFileError(f"{path} is not a state dict of tensors: {name!r} holds a {shown}.")
        arrays[name] = _array(record, read_storage, cache, path, name)
    return arrays


def _array(record, read_storage, cache, path, name):
    """The tensor of `record` as a contiguous NumPy array."""
    storage, offset = record.storage, record.offset
    if storage.root is not None:
        storage, offset = storage.root, offset + storage.offset
    if storage.key not in cache:
        data, order = read_storage(storage)
        flat = np.frombuffer(data, dtype=_numpy_dtype(storage.dtype).newbyteorder(order))
        if flat.size != storage.numel:
            raise TorchFileError(f"{path}: storage {storage.key} holds {flat.size} elements, {storage.numel} "
                                 "were announced.")
        cache[storage.key] = flat
    flat = cache[storage.key]
    last = offset + sum((n - 1) * s for n, s in zip(record.size, record.stride)) if all(record.size) else offset - 1
    if last >= flat.size:
        raise TorchFileError(f"{path}: tensor {name!r} of size {record.size} reaches past its storage.")
    view = np.lib.stride_tricks.as_strided(flat[offset:] if flat.size else flat, shape=record.size,
                                           strides=[s * flat.itemsize for s in record.stride], writeable=False)
    array = np.array(view, dtype=view.dtype.newbyteorder("="), order="C")
    if storage.dtype == BFLOAT16:
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array


def _numpy_dtype(dtype):
    return np.dtype("u2" if dtype == BFLOAT16 else dtype)
