"""TensorBoard's event files, written without TensorFlow: scalars of a training run that TensorBoard (and
`tf.data.TFRecordDataset` with `tensorflow.core.util.event_pb2.Event`) reads.

An event file is a sequence of TFRecords (a little-endian uint64 length,
its masked CRC-32C, the bytes, their masked CRC-32C), each an `Event`
protocol buffer: the first holds `file_version` `"brain.Event:2"`, the
others a `Summary` of `simple_value` scalars at a step. The few fields
needed are encoded here by hand (protobuf's wire format), so a run on JAX or
PyTorch writes the logs a run on TensorFlow writes, with nothing installed
for it.
"""
import itertools
import os
import socket
import struct
import time

FILE_VERSION = "brain.Event:2"


class EventFileWriter:
    """Appends scalar events to a new event file in `log_dir` (created if missing).

    Args:
        log_dir: the folder TensorBoard is pointed at (`--logdir`).

    The file is `events.out.tfevents.<seconds>.<host>.<pid>.<n>.bilm`, as
    TensorFlow names its own, `n` the first number that names no file yet:
    a folder holds one per writer (a run, each restart), never replaced.
    `scalars` writes records whole and `flush` pushes them to the file. Use
    it as a context manager, or `close` it.
    """

    def __init__(self, log_dir):
        log_dir = os.fspath(log_dir)
        os.makedirs(log_dir, exist_ok=True)
        stem = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        for n in itertools.count():
            self.path = os.path.join(log_dir, f"{stem}.{n}.bilm")
            try:
                self._file = open(self.path, "xb")  # noqa: SIM115 (closed by close())
                break
            except FileExistsError:
                continue
        self._write(_event(time.time(), 0, file_version=FILE_VERSION))
        self.flush()

    def scalars(self, step, values):
        """Writes `{tag: number}` as one event at `step` (an int)."""
        summary = b"".join(_field(1, _field(1, tag.encode()) + _float_field(2, value)) for tag, value in
                           values.items())
        self._write(_event(time.time(), int(step), summary=summary))

    def flush(self):
        self._file.flush()

    def close(self):
        if not self._file.closed:
            self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _write(self, data):
        length = struct.pack("<Q", len(data))
        self._file.write(length + struct.pack("<I", masked_crc32c(length)) + data +
                         struct.pack("<I", masked_crc32c(data)))


def _event(wall_time, step, file_version=None, summary=None):
    """An `Event`: wall_time (1, double), step (2, int64), file_version (3) or summary (5)."""
    data = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)
    if file_version is not None:
        data += _field(3, file_version.encode())
    if summary is not None:
        data += _field(5, summary)
    return data


def _field(number, payload):
    """A length-delimited field (string, bytes or message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _float_field(number, value):
    return _varint(number << 3 | 5) + struct.pack("<f", float(value))


def _varint(value):
    value &= (1 << 64) - 1  # a negative int64 as protobuf encodes it
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli) of `data` bytes."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    """The TFRecord's masked CRC-32C of `data`."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
