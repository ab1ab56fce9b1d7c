"""SentenceEmbeddingFile: a crash leaves no complete-looking file, a resume never mixes two runs, and two
processes never write one output."""
import os

import h5py
import numpy as np
import pytest

from bilm.io.formats.embedding_files import SentenceEmbeddingFile
from bilm.io.formats.output_files import OutputFileError, OutputLockedError
from helpers import SENTENCES, ready_process

MADE_FROM = {"output_format": "all", "weight_sha256": "ab" * 32}


def _dataset_file(tmp_path, sentences):
    path = tmp_path / "sentences.txt"
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return str(path)


class Killed(Exception):
    """Stands for the process being killed mid-way."""


def _embed(calls, fail_at=None):
    def embed(sentences):
        calls.append(len(sentences))
        if len(calls) == fail_at:
            raise Killed
        return [np.full((len(s), 2), len(s), np.float32) for s in sentences]
    return embed


def test_interrupted_write_leaves_no_complete_looking_file_and_resumes(tmp_path):
    dataset_file = _dataset_file(tmp_path, SENTENCES * 4)
    outfile = str(tmp_path / "out.hdf5")
    calls = []
    with pytest.raises(Killed):
        SentenceEmbeddingFile(dataset_file, outfile, MADE_FROM, verbose=0).write(
            _embed(calls, fail_at=3), batch_size=3)
    assert not (tmp_path / "out.hdf5").exists()
    with h5py.File(outfile + ".partial", "r") as f:
        assert len(f) == 6
    calls.clear()
    target = SentenceEmbeddingFile(dataset_file, outfile, MADE_FROM, verbose=0)
    assert target.resuming
    assert target.write(_embed(calls), batch_size=3) == len(SENTENCES) * 4 - 6
    assert sum(calls) == len(SENTENCES) * 4 - 6
    with h5py.File(outfile, "r") as f:
        assert len(f) == len(SENTENCES) * 4
        assert f.attrs["bilm_file"] == "sentence_embeddings" and f.attrs["output_format"] == "all"
        for i in range(len(SENTENCES) * 4):
            n = len(SENTENCES[i % len(SENTENCES)])
            np.testing.assert_array_equal(f[str(i)][...], np.full((n, 2), n))


@pytest.mark.parametrize("change, message", [
    ("edit the input", "the input file's content changed"),
    ("grow the input", "the input file's size changed from 154 to 163 bytes"),
    ("other weights", "the weight file changed"),
    ("other format", "output_format was 'all', now 'top'"),
])
def test_a_partial_made_from_something_else_is_never_continued(tmp_path, change, message):
    dataset_file = _dataset_file(tmp_path, SENTENCES * 2)
    outfile = str(tmp_path / "out.hdf5")
    with pytest.raises(Killed):
        SentenceEmbeddingFile(dataset_file, outfile, MADE_FROM, verbose=0).write(_embed([], fail_at=2), 3)
    made_from = dict(MADE_FROM)
    if change == "edit the input":  # same size, other text
        text = open(dataset_file, encoding="utf-8").read()
        open(dataset_file, "w", encoding="utf-8").write(text.replace("The cat", "A dog!!"))
    elif change == "grow the input":
        open(dataset_file, "a", encoding="utf-8").write("one more\n")
    elif change == "other weights":
        made_from["weight_sha256"] = "cd" * 32
    else:
        made_from["output_format"] = "top"
    with pytest.raises(OutputFileError, match=f"Cannot resume from .*out.hdf5.partial.*{message}.*--no_resume"):
        SentenceEmbeddingFile(dataset_file, outfile, made_from, verbose=0)
    # Starting over gives the file an uninterrupted run gives.
    SentenceEmbeddingFile(dataset_file, outfile, made_from, resume=False, verbose=0).write(_embed([]), 3)
    fresh = str(tmp_path / "fresh.hdf5")
    SentenceEmbeddingFile(dataset_file, fresh, made_from, verbose=0).write(_embed([]), 3)
    with h5py.File(outfile, "r") as a, h5py.File(fresh, "r") as b:
        assert dict(a.attrs) == dict(b.attrs) and sorted(a) == sorted(b)
        for key in b:
            np.testing.assert_array_equal(a[key][...], b[key][...])


def test_a_partial_bilm_did_not_write_is_kept_unless_overwrite(tmp_path):
    dataset_file = _dataset_file(tmp_path, SENTENCES)
    outfile = str(tmp_path / "out.hdf5")
    (tmp_path / "out.hdf5.partial").write_bytes(b"someone's notes")
    for resume in (True, False):
        with pytest.raises(OutputFileError, match="out.hdf5.partial already exists and is not a file that bilm "
                                                  "wrote.*--overwrite"):
            SentenceEmbeddingFile(dataset_file, outfile, MADE_FROM, resume=resume, verbose=0)
    assert (tmp_path / "out.hdf5.partial").read_bytes() == b"someone's notes"
    SentenceEmbeddingFile(dataset_file, outfile, MADE_FROM, resume=False, overwrite=True, verbose=0).write(
        _embed([]), 3)
    assert not (tmp_path / "out.hdf5.partial").exists() and (tmp_path / "out.hdf5").exists()


# A writer that stops after its first batch (in the file, flushed) until a line comes on its stdin.
PAUSED_WRITER = """
import sys
import numpy as np
from bilm.io.formats.embedding_files import SentenceEmbeddingFile
calls = []
def embed(sentences):
    if calls:
        print("ready", flush=True)
        sys.stdin.readline()
    calls.append(1)
    return [np.full((len(s), 2), len(s), np.float32) for s in sentences]
target = SentenceEmbeddingFile(sys.argv[1], sys.argv[2], {"output_format": "all"}, resume=False, overwrite=True,
                               verbose=0)
target.write(embed, batch_size=2)
"""


@pytest.mark.slow
def test_a_second_writer_is_refused_whatever_its_flags_and_the_first_finishes(tmp_path):
    dataset_file = _dataset_file(tmp_path, SENTENCES * 2)
    outfile = str(tmp_path / "out.hdf5")
    child = ready_process(PAUSED_WRITER, dataset_file, outfile)  # started with --overwrite --no_resume itself
    try:
        partial = open(outfile + ".partial", "rb").read()
        for resume in (True, False):
            for overwrite in (False, True):
                with pytest.raises(OutputLockedError, match=rf"^Another process \(PID {child.pid}\) is writing "
                                                            f"{outfile} "):
                    SentenceEmbeddingFile(dataset_file, outfile, MADE_FROM, resume=resume, overwrite=overwrite,
                                          verbose=0)
                assert open(outfile + ".partial", "rb").read() == partial
    finally:
        child.communicate("\n", timeout=120)
    assert child.returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["out.hdf5", "sentences.txt"]
    with h5py.File(outfile, "r") as f:
        assert len(f) == len(SENTENCES) * 2


@pytest.mark.slow
def test_a_partial_another_program_has_open_for_writing_is_never_touched(tmp_path):
    dataset_file = _dataset_file(tmp_path, SENTENCES)
    outfile = str(tmp_path / "out.hdf5")
    child = ready_process("import sys, h5py\nf = h5py.File(sys.argv[1], 'w')\nf['x'] = [1.0]\nf.flush()\n"
                   "print('ready', flush=True)\nsys.stdin.readline()\nf.close()", outfile + ".partial")
    try:
        for resume in (True, False):
            for overwrite in (False, True):
                with pytest.raises(OutputLockedError, match="out.hdf5.partial is open for writing in another "
                                                            "process"):
                    SentenceEmbeddingFile(dataset_file, outfile, MADE_FROM, resume=resume, overwrite=overwrite,
                                          verbose=0)
    finally:
        child.communicate("\n", timeout=120)
    with h5py.File(outfile + ".partial", "r") as f:
        assert f["x"][0] == 1.0
