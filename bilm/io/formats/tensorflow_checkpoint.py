"""TensorFlow's checkpoint files read with NumPy alone: a training run's checkpoint written on TensorFlow
(`tf.train.Checkpoint`) opened where TensorFlow is not installed (a JAX or PyTorch machine).

A checkpoint `<prefix>` is two files (TensorFlow's "tensor bundle"):
- `<prefix>.index`: a sorted table (LevelDB's block table, uncompressed)
  from each tensor's name to where its bytes are: its dtype, shape, shard,
  offset and size (a `BundleEntryProto`); the empty name holds the header;
- `<prefix>.data-00000-of-00001`: the tensors' bytes, little-endian, one
  after another (a string tensor: each element's length as a varint, a
  4-byte checksum of the lengths, then the bytes).
A save directory's `checkpoint` file (a text protobuf) lists its checkpoints,
the newest as `model_checkpoint_path`.

Only what a training checkpoint holds is read (dense float, integer, bool and
string tensors in one or more shards; no partitioned variables). A file cut
short is a `TensorflowCheckpointError` naming it.
"""
import ast
import os
import re

import numpy as np

from bilm.errors import UserError

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_BLOCK_TRAILER_SIZE = 5  # a block's compression type and checksum
# TensorFlow's DataType numbers: the NumPy dtype of each a training checkpoint holds (7: DT_STRING).
_DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8, 9: np.int64,
           10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32, 23: np.uint64}
_STRING = 7


class TensorflowCheckpointError(UserError):
    """A TensorFlow checkpoint whose files are missing, cut short or of a kind this reader does not read."""


def read_tensorflow_checkpoint(prefix, wanted=None):
    """`{name: np.ndarray}` of the checkpoint `prefix` (`.../model.ckpt-5`): every tensor, or those of the
    names for which `wanted(name)` is true. String tensors are arrays of `bytes` (a scalar: shape `()`)."""
    prefix = os.fspath(prefix)
    entries = _index_entries(prefix)
    header = _message(entries.pop(b"", b""))
    n_shards = _first(header, 1, 1)
    arrays, shards = {}, {}
    try:
        for key, value in entries.items():
            name = key.decode("utf-8")
            if wanted is not None and not wanted(name):
                continue
            entry = _message(value)
            shard = _first(entry, 3, 0)
            if shard not in shards:
                shards[shard] = open(f"{prefix}.data-{shard:05d}-of-{n_shards:05d}", "rb")
            arrays[name] = _tensor(shards[shard], entry, prefix, name)
    except FileNotFoundError as error:
        raise TensorflowCheckpointError(
            f"{error.filename} is missing: the checkpoint {prefix} is incomplete.") from None
    finally:
        for f in shards.values():
            f.close()
    return arrays


def listed_checkpoints(save_dir):
    """The checkpoint prefixes `save_dir`'s `checkpoint` file lists whose index exists, oldest first (the
    newest, `model_checkpoint_path`, last); `[]` when there is no such file."""
    save_dir = os.fspath(save_dir)
    try:
        with open(os.path.join(save_dir, "checkpoint"), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    fields = {}
    for field, quoted in re.findall(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*(".*")\s*$',
                                    text, flags=re.MULTILINE):
        path = ast.literal_eval(quoted)  # a C-escaped string, as Python writes one
        fields.setdefault(field, []).append(path if os.path.isabs(path) else os.path.join(save_dir, path))
    paths = fields.get("all_model_checkpoint_paths", []) or fields.get("model_checkpoint_path", [])
    newest = fields.get("model_checkpoint_path", [None])[-1]
    if newest is not None and newest not in paths:
        paths.append(newest)
    return [path for path in paths if os.path.exists(path + ".index")]


# === The index: a block table ===

def _index_entries(prefix):
    """`{key: value}` (bytes) of the index file's table, in key order."""
    path = prefix + ".index"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TensorflowCheckpointError(f"{path} is missing: {prefix} is not a checkpoint.") from None
    if len(data) < _FOOTER_SIZE or int.from_bytes(data[-8:], "little") != _TABLE_MAGIC:
        raise TensorflowCheckpointError(f"{path} is not a TensorFlow checkpoint index (cut short or corrupted).")
    footer = data[-_FOOTER_SIZE:]
    _, position = _varint(footer, 0)  # the metaindex block's offset and size: not used
    _, position = _varint(footer, position)
    index_offset, position = _varint(footer, position)
    index_size, _ = _varint(footer, position)
    entries = {}
    for _, handle in _block(data, index_offset, index_size, path):
        offset, position = _varint(handle, 0)
        size, _ = _varint(handle, position)
        entries.update(_block(data, offset, size, path))
    return entries


def _block(data, offset, size, path):
    """The `(key, value)` entries of the block at `offset` (keys share prefixes with the previous key)."""
    if offset + size + _BLOCK_TRAILER_SIZE > len(data) - _FOOTER_SIZE:
        raise TensorflowCheckpointError(f"{path} is cut short or corrupted (a block past its end).")
    if data[offset + size] != 0:
        raise TensorflowCheckpointError(f"{path} holds a compressed block, which this reader does not read.")
    block = data[offset:offset + size]
    n_restarts = int.from_bytes(block[-4:], "little")
    end = len(block) - 4 * (n_restarts + 1)
    position, key, entries = 0, b"", []
    while position < end:
        shared, position = _varint(block, position)
        unshared, position = _varint(block, position)
        value_size, position = _varint(block, position)
        key = key[:shared] + block[position:position + unshared]
        position += unshared
        entries.append((key, block[position:position + value_size]))
        position += value_size
    return entries


# === Protocol buffers: the few fields read here ===

def _varint(data, position):
    result = shift = 0
    while True:
        if position >= len(data):
            raise TensorflowCheckpointError("a TensorFlow checkpoint index is cut short (a number past its end).")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7


def _message(data):
    """`{field number: [values]}` of a serialized protobuf message: ints (varint, fixed32, fixed64) and bytes
    (length-delimited: strings and nested messages)."""
    fields, position = {}, 0
    while position < len(data):
        tag, position = _varint(data, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, position = _varint(data, position)
        elif wire_type == 1:
            value, position = int.from_bytes(data[position:position + 8], "little"), position + 8
        elif wire_type == 2:
            size, position = _varint(data, position)
            value, position = data[position:position + size], position + size
        elif wire_type == 5:
            value, position = int.from_bytes(data[position:position + 4], "little"), position + 4
        else:
            raise TensorflowCheckpointError(f"a TensorFlow checkpoint index holds an unknown field type {wire_type}.")
        fields.setdefault(number, []).append(value)
    return fields


def _first(fields, number, default):
    return fields.get(number, [default])[0]


def _tensor(shard, entry, prefix, name):
    """One tensor of a `BundleEntryProto` (dtype 1, shape 2, shard 3, offset 4, size 5, slices 7)."""
    if 7 in entry:
        raise TensorflowCheckpointError(f"{prefix}: {name} is a partitioned variable, which this reader does not read.")
    dtype, offset, size = _first(entry, 1, 0), _first(entry, 4, 0), _first(entry, 5, 0)
    shape = tuple(_first(_message(dim), 1, 0) for dim in _message(_first(entry, 2, b"")).get(2, []))
    shard.seek(offset)
    data = shard.read(size)
    if len(data) != size:
        raise TensorflowCheckpointError(f"{shard.name} is cut short ({name}'s bytes end past the file's end): the "
                                        f"checkpoint {prefix} is damaged.")
    if dtype == _STRING:
        return _strings(data, shape, prefix, name)
    if dtype not in _DTYPES:
        raise TensorflowCheckpointError(f"{prefix}: {name} has TensorFlow dtype {dtype}, which this reader does not "
                                        "read.")
    array = np.frombuffer(data, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<"))
    if array.size != int(np.prod(shape)):
        raise TensorflowCheckpointError(f"{prefix}: {name} has {array.size} values for its shape {shape} (damaged).")
    return array.reshape(shape).astype(_DTYPES[dtype])


def _strings(data, shape, prefix, name):
    count, position, lengths = int(np.prod(shape)), 0, []
    for _ in range(count):
        length, position = _varint(data, position)
        lengths.append(length)
    position += 4  # the lengths' checksum
    values = []
    for length in lengths:
        values.append(bytes(data[position:position + length]))
        position += length
    if position != len(data):
        raise TensorflowCheckpointError(f"{prefix}: {name}'s strings do not fill their bytes (damaged).")
    result = np.empty(count, dtype=object)
    result[:] = values
    return result.reshape(shape)
