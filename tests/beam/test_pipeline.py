"""The Beam pipeline on the local runner: worker processes write each shard's file as bin/elmo.py does and give
each sentence embed's vectors exactly once; reruns skip complete shards; nothing of the user's is replaced."""
import collections
import json
import os
import pickle
import re
import runpy
import shlex
import zipfile

import apache_beam as beam
import h5py
import numpy as np
import pytest
from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.localfilesystem import LocalFileSystem
from apache_beam.options.pipeline_options import PipelineOptions

from bilm.beam import ELMoModelHandler, EmbedFiles, EmbedSentences, shard_outputs
from bilm.beam.__main__ import main, parse_arguments, run
from bilm.io.sources.model_cache import download_path
from bilm.pretrained import ELMo
from helpers import ROOT, SENTENCES

LINES = [" ".join(sentence) for sentence in SENTENCES]
SHARDS = {"a.txt": LINES, "b.txt": LINES[::-1] + ["The cat", "sat ."], "c": ["Hi", "", "a b a"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """`(shard directory, warm-up text file)`."""
    root = tmp_path_factory.mktemp("corpus")
    (root / "shards").mkdir()
    for name, lines in SHARDS.items():
        (root / "shards" / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (root / "warm.txt").write_text("".join(line + "\n" for line in LINES if line) * 3, encoding="utf-8")
    return str(root / "shards"), str(root / "warm.txt")


def _read(path):
    """({dataset name: array}, sentence_to_index, root attributes)."""
    with h5py.File(path, "r") as f:
        return ({key: f[key][...] for key in f if key != "sentence_to_index"},
                json.loads(f["sentence_to_index"][0]), dict(f.attrs))


def _assert_same_file(path, expected_path, exact=False):
    (arrays, mapping, attrs), (expected, expected_mapping, expected_attrs) = _read(path), _read(expected_path)
    assert arrays.keys() == expected.keys() and mapping == expected_mapping
    assert attrs.keys() == expected_attrs.keys()
    for key, value in expected_attrs.items():
        assert np.array_equal(attrs[key], value), key
    for key, array in expected.items():
        assert arrays[key].shape == array.shape
        if exact:
            assert np.array_equal(arrays[key], array), key
        else:
            np.testing.assert_allclose(arrays[key], array, atol=1e-6)


@pytest.fixture(scope="module")
def whole_vectors_model(tmp_path_factory):
    """A tiny model whose widths are multiples of 16, as every published model's: its vectors are the same
    bytes however sentences are batched (elmo.py's --batch_size, Beam's workers and shards)."""
    from helpers import write_model

    return write_model(tmp_path_factory.mktemp("whole_vectors_model"), lstm_dim=16, projection_dim=16,
                       filters=((1, 4), (2, 5), (3, 7)))


def _identity(path):
    """What changes when a file is replaced or rewritten (not when it is read)."""
    stat = os.stat(path)
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def _bin_elmo(*argv):
    runpy.run_path(os.path.join(ROOT, "bin", "elmo.py"))["main"]([str(arg) for arg in argv])


@pytest.mark.slow
def test_two_worker_processes_write_bin_elmos_files_to_round_off_or_byte_for_byte_and_embed_each_sentence_once(
        tmp_path, model, whole_vectors_model, corpus):
    """One pipeline on two worker processes, for two models at once (one worker start for both): for each, its
    shards' files (`EmbedFiles`) and its sentences' vectors (`EmbedSentences`, each sentence once) agree with
    bin/elmo.py's and `ELMo.embed`'s, to round-off for `model` (widths that are not multiples of 16), byte for byte
    for `whole_vectors_model`, whose bin/elmo.py file is then embedded one sentence at a time."""
    shard_dir, warm_up = corpus
    sentences = [line for lines in SHARDS.values() for line in lines]
    models = {"round_off": model, "whole_vectors": whole_vectors_model}
    options = PipelineOptions(direct_num_workers=2, direct_running_mode="multi_processing")
    pipeline = beam.Pipeline(runner="FnApiRunner", options=options)
    shards = {}
    for name, (options_file, weight_file, _) in models.items():
        handler = ELMoModelHandler(options_file=options_file, weight_file=weight_file, layers="all",
                                   warm_up=warm_up)
        shards[name] = shard_outputs(os.path.join(shard_dir, "*"), tmp_path / name)
        written = (pipeline | f"Shards {name}" >> beam.Create(shards[name])
                   | f"Files {name}" >> EmbedFiles(handler, "all"))
        _gather(written | f"Names {name}" >> beam.MapTuple(
            lambda input_file, output_file, n: (os.path.basename(output_file), n)), tmp_path / f"{name}.files")
        vectors = (pipeline | f"Sentences {name}" >> beam.Create(list(enumerate(sentences)))
                   | f"Vectors {name}" >> EmbedSentences(handler, keyed=True))
        _gather(vectors, tmp_path / f"{name}.vectors")
    result = pipeline.run()
    result.wait_until_finish()

    for name, (options_file, weight_file, _) in models.items():
        exact = name == "whole_vectors"
        assert [(os.path.basename(i), os.path.basename(o)) for i, o in shards[name]] == [
            ("a.txt", "a.hdf5"), ("b.txt", "b.hdf5"), ("c", "c.hdf5")]
        assert sorted(_gathered(tmp_path / f"{name}.files")) == [("a.hdf5", 5), ("b.hdf5", 7), ("c.hdf5", 3)], name
        reference = ELMo(options_file, weight_file, warm_up=warm_up)
        expected = reference.embed(sentences, layers="all")
        results = _gathered(tmp_path / f"{name}.vectors")
        counts = collections.Counter(key for key, _ in results)
        assert sorted(counts) == list(range(len(sentences))) and set(counts.values()) == {1}, (name, counts)
        for key, vectors in results:
            if exact:
                assert np.array_equal(vectors, expected[key]), (name, key)
            else:
                np.testing.assert_allclose(vectors, expected[key], atol=1e-5, err_msg=f"{name} {key}")

        loads = result.metrics().query(
            beam.metrics.MetricsFilter().with_name("model_loads").with_step(f"Files {name}"))["counters"]
        assert 1 <= sum(counter.committed for counter in loads) <= 2, name  # once per worker process at most
        assert sorted(os.listdir(tmp_path / name)) == ["a.hdf5", "b.hdf5", "c.hdf5"], name  # no temporary file left
        # bin/elmo.py for one shard; the others through the function it calls, on one loaded model.
        _bin_elmo(shards[name][1][0], tmp_path / "bin_elmo.hdf5", "--options_file", options_file, "--weight_file",
                  weight_file, "--warm_up", warm_up, *(["--batch_size", 1] if exact else []))
        _assert_same_file(shards[name][1][1], tmp_path / "bin_elmo.hdf5", exact)
        for input_file, output_file in shards[name][::2]:
            reference.embed_file(input_file, tmp_path / "expected.hdf5", verbose=0, overwrite=True)
            _assert_same_file(output_file, tmp_path / "expected.hdf5", exact)


def _gather(pcollection, path):
    """Writes the elements of `pcollection`, all of them in one list (duplicates too), to the pickle file `path`:
    the workers are processes on this machine."""
    label = os.path.basename(path)

    def write(elements):
        with open(path, "wb") as f:
            pickle.dump(elements, f)

    pcollection | f"Gather {label}" >> beam.combiners.ToList() | f"Write {label}" >> beam.Map(write)


def _gathered(path):
    with open(path, "rb") as f:
        return pickle.load(f)


@pytest.mark.slow
def test_a_rerun_skips_complete_shards_and_redoes_a_changed_one(tmp_path, model, capsys):
    options_file, weight_file, _ = model
    shards = tmp_path / "shards"
    shards.mkdir()
    for name, lines in SHARDS.items():  # no blank line: sentence keys name every line
        (shards / name).write_text("".join(line + "\n" for line in lines if line), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--input", str(shards / "*"), "--output_dir", str(out), "--options_file", options_file,
            "--weight_file", weight_file, "--top", "--use_sentence_keys", "--start", "zeros", "--runner", "FnApiRunner"]
    assert run(argv) == {"shards": 3, "shards_written": 3, "sentences_written": 12, "model_loads": 1}
    _bin_elmo(shards / "b.txt", tmp_path / "b.hdf5", "--options_file", options_file, "--weight_file", weight_file,
              "--top", "--use_sentence_keys", "--start", "zeros")
    _assert_same_file(out / "b.hdf5", tmp_path / "b.hdf5")

    before = {name: _identity(out / name) for name in os.listdir(out)}
    main(argv)
    assert "3 shards: wrote 0 embedding files (0 sentence datasets); 3 were complete" in capsys.readouterr().out
    assert {name: _identity(out / name) for name in os.listdir(out)} == before

    with open(shards / "a.txt", "a") as f:
        f.write("one more line\n")
    assert run(argv) == {"shards": 3, "shards_written": 1, "sentences_written": 5, "shards_complete": 2,
                         "model_loads": 1}
    assert _identity(out / "b.hdf5") == before["b.hdf5"] and _identity(out / "a.hdf5") != before["a.hdf5"]
    assert "one more line" in _read(out / "a.hdf5")[1]


@pytest.mark.parametrize("case, message", [
    ("user's file in the way", "out/a.hdf5 already exists and is not a file that bilm wrote; it is never replaced "
                               "without --overwrite"),
    ("outputs among the inputs", "The output directory .*shards holds the input"),
    ("two shards, one output", "The inputs .*a.text and .*a.txt would both be written to .*a.hdf5"),
    ("no shard", "No file matches .*nothing"),
    ("missing model file", "Model file not found: .*missing.json"),
])
def test_mistakes_end_with_one_error_line_before_any_work(tmp_path, model, case, message, capsys):
    options_file, weight_file, _ = model
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.txt").write_text("The cat\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.hdf5").write_text("my notes\n")
    argv = {"--input": tmp_path / "shards" / "*", "--output_dir": tmp_path / "other_out",
            "--options_file": options_file, "--weight_file": weight_file}
    if case == "user's file in the way":
        argv["--output_dir"] = tmp_path / "out"
    elif case == "outputs among the inputs":
        argv["--output_dir"] = tmp_path / "shards"
    elif case == "two shards, one output":
        (tmp_path / "shards" / "a.text").write_text("Hi\n")
    elif case == "no shard":
        argv["--input"] = tmp_path / "nothing*"
    else:
        argv["--options_file"] = tmp_path / "missing.json"
    with pytest.raises(SystemExit) as exit_info:
        main([str(word) for pair in argv.items() for word in pair])
    assert str(exit_info.value).startswith("Error: ")
    assert re.search(message, str(exit_info.value))
    assert (tmp_path / "out" / "a.hdf5").read_text() == "my notes\n"


def test_a_flag_neither_bilm_nor_beam_knows_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--input", "x", "--output_dir", "y", "--model", "m", "--runner", "FnApiRunner", "--use_sentence_key"])
    assert exit_info.value.code == 2
    assert "Error: python -m bilm.beam: unrecognized arguments: --use_sentence_key" in capsys.readouterr().err


class BucketFileSystem(LocalFileSystem):
    """`bucket://PATH`: a bucket for the tests, kept in the local directory `root`."""

    root = None

    @classmethod
    def scheme(cls):
        return "bucket"

    def _local(self, path):
        return os.path.join(self.root, path[len("bucket://"):])

    def join(self, base, *paths):
        return "/".join([base.rstrip("/"), *paths])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def _list(self, prefix):
        for directory, _, names in os.walk(self._local(prefix)):
            for name in names:
                local = os.path.join(directory, name)
                yield FileMetadata("bucket://" + os.path.relpath(local, self.root), os.path.getsize(local),
                                   os.path.getmtime(local))

    def create(self, path, *args, **kwargs):
        os.makedirs(os.path.dirname(self._local(path)), exist_ok=True)
        return super().create(self._local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return super().open(self._local(path), *args, **kwargs)

    def rename(self, sources, destinations):
        super().rename([self._local(p) for p in sources], [self._local(p) for p in destinations])

    def exists(self, path):
        return os.path.exists(self._local(path))

    def delete(self, paths):
        for path in paths:
            os.remove(self._local(path))


@pytest.mark.slow
def test_model_shards_and_outputs_in_a_bucket(tmp_path, model, monkeypatch):
    options_file, weight_file, _ = model
    monkeypatch.setattr(BucketFileSystem, "root", str(tmp_path / "bucket"))
    (tmp_path / "bucket" / "corpus").mkdir(parents=True)
    for name in ("a.txt", "c"):
        (tmp_path / "bucket" / "corpus" / name).write_text("".join(line + "\n" for line in SHARDS[name]))
    with zipfile.ZipFile(tmp_path / "bucket" / "tiny.zip", "w") as archive:
        archive.write(options_file, "tiny/options.json")
        archive.write(weight_file, "tiny/weights.hdf5")
    cache = tmp_path / "cache"
    argv = ["--input", "bucket://corpus/*", "--output_dir", "bucket://out", "--model", "bucket://tiny.zip",
            "--cache_dir", str(cache), "--start", "zeros", "--runner", "FnApiRunner"]
    assert run(argv)["shards_written"] == 2
    assert os.path.isfile(download_path("bucket://tiny.zip", cache))  # the model came through bilm's cache
    assert sorted(os.listdir(tmp_path / "bucket" / "out")) == ["a.hdf5", "c.hdf5"]
    for name in ("a.txt", "c"):
        _bin_elmo(tmp_path / "bucket" / "corpus" / name, tmp_path / "expected.hdf5", "--options_file", options_file,
                  "--weight_file", weight_file, "--start", "zeros")
        _assert_same_file(tmp_path / "bucket" / "out" / (os.path.splitext(name)[0] + ".hdf5"),
                          tmp_path / "expected.hdf5")
    assert run(argv)["shards_complete"] == 2

    (tmp_path / "bucket" / "out" / "c.hdf5").write_text("not mine to replace\n")
    with pytest.raises(SystemExit, match="Error: .*bucket://out/c.hdf5 already exists and is not an embedding file"):
        main(argv)


def test_the_readmes_commands_are_flags_that_bilm_or_beam_knows():
    readme = open(os.path.join(ROOT, "docs", "beam.md"), encoding="utf-8").read()
    section = readme[readme.index("\n## Embed a corpus on Apache Beam\n"):]
    section = section[:section.index("\n## ", 1)]
    commands = [line.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
                for line in block.replace("\\\n", " ").splitlines() if line.startswith("python -m bilm.beam")]
    assert len(commands) == 4
    for command in commands:
        args, pipeline_options = parse_arguments(shlex.split(command)[3:])
        assert args.input and args.output_dir and pipeline_options.get_all_options()["runner"]
