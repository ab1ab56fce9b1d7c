"""TensorBoard's event files for a training run's scalars, on every backend: the `tensorboard` package's record
framing (`RecordWriter`, with its masked CRC-32C) and protocol buffers, without TensorFlow.

An event file is a sequence of TFRecords, each an `Event`: the first holds
`file_version` `"brain.Event:2"`, the others a `Summary` of `simple_value`
scalars at a step, which TensorBoard and TensorFlow's readers read. The
`tensorboard` package's own `EventFileWriter` is not used: it opens its file
through `tensorboard.compat.tf`, which imports TensorFlow wherever it is
installed, and names its file with a time that two writers can share.
"""
import itertools
import os
import socket
import time

from bilm.errors import UserError

FILE_VERSION = "brain.Event:2"


def check_available():
    """Raises `UserError` naming the fix where the `tensorboard` package is not installed (before a run that
    writes scalars starts its work)."""
    _tensorboard()


def _tensorboard():
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError:
        raise UserError("TensorBoard's scalars (log_dir, --log_dir) are written with the tensorboard package, "
                        "which is not installed: pip install tensorboard, or train with log_dir=None.") from None
    return event_pb2, summary_pb2, RecordWriter


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
        event_pb2, summary_pb2, RecordWriter = _tensorboard()
        self._protos = event_pb2, summary_pb2
        log_dir = os.fspath(log_dir)
        os.makedirs(log_dir, exist_ok=True)
        stem = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        for n in itertools.count():
            self.path = os.path.join(log_dir, f"{stem}.{n}.bilm")
            try:
                file = open(self.path, "xb")  # noqa: SIM115 (closed by close())
                break
            except FileExistsError:
                continue
        self._records = RecordWriter(file)
        self._write(self._protos[0].Event(wall_time=time.time(), file_version=FILE_VERSION))
        self.flush()

    def scalars(self, step, values):
        """Writes `{tag: number}` as one event at `step` (an int)."""
        event_pb2, summary_pb2 = self._protos
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
                                             for tag, value in values.items()])
        self._write(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def flush(self):
        self._records.flush()

    @property
    def closed(self):
        return self._records.closed

    def close(self):
        if not self._records.closed:
            self._records.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _write(self, event):
        self._records.write(event.SerializeToString())
