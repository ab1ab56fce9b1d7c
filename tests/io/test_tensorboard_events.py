"""bilm.io.formats.tensorboard_events: event files written without TensorFlow, read by TensorFlow's reader and by
TensorBoard's."""
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorflow.core.util import event_pb2

from bilm.io.formats.tensorboard_events import FILE_VERSION, EventFileWriter


def test_scalars_read_back_through_tensorflow_and_tensorboard(tmp_path):
    with EventFileWriter(tmp_path / "logs") as writer:
        writer.scalars(5, {"train_perplexity": 123.5, "gradient_norm": 0.25})
        writer.scalars(2 ** 40, {"heldout_perplexity": 99.0})
    files = list((tmp_path / "logs").iterdir())
    assert [f.name.startswith("events.out.tfevents.") for f in files] == [True]
    # TensorFlow's TFRecord reader checks each record's checksums.
    events = [event_pb2.Event.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(files[0]))]
    assert events[0].file_version == FILE_VERSION
    assert [(e.step, {v.tag: v.simple_value for v in e.summary.value}) for e in events[1:]] == [
        (5, {"train_perplexity": 123.5, "gradient_norm": 0.25}), (2 ** 40, {"heldout_perplexity": 99.0})]
    accumulator = EventAccumulator(str(tmp_path / "logs"))
    accumulator.Reload()
    assert sorted(accumulator.Tags()["scalars"]) == ["gradient_norm", "heldout_perplexity", "train_perplexity"]
    assert [(s.step, s.value) for s in accumulator.Scalars("train_perplexity")] == [(5, 123.5)]


def test_a_damaged_record_fails_tensorflows_checksum(tmp_path):
    with EventFileWriter(tmp_path) as writer:
        writer.scalars(1, {"loss": 2.0})
    path = next(tmp_path.iterdir())
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # inside the last record's float
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(path)))


def test_each_writer_opens_a_file_of_its_own(tmp_path):
    # Two writers in one process, the same second: two files, neither replaced.
    with EventFileWriter(tmp_path) as first, EventFileWriter(tmp_path) as second:
        first.scalars(1, {"a": 1.0})
        second.scalars(1, {"b": 2.0})
    assert first.path != second.path
    tags = [{v.tag for r in tf.data.TFRecordDataset(path) for v in event_pb2.Event.FromString(r.numpy()).summary.value}
            for path in (first.path, second.path)]
    assert tags == [{"a"}, {"b"}]
