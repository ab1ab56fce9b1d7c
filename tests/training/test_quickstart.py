"""The quick start's directory, its reruns and its options (the whole run with the real corpus, and a real
rerun in its directory, is test_usage_and_cli.py's slow end-to-end test)."""
import functools
import os
import threading

import pytest

from bilm.io.formats.output_files import OutputLockedError, writer_lock
from bilm.presets import PRESETS
from bilm.training import quickstart
from bilm.training.config.settings import training_settings
from bilm.training.data.sample_corpus import write_sample_corpus
from bilm.training.quickstart import MARKER, QuickstartDirectory, prepare_directory, quickstart_options, run_quickstart

SMALL_CORPUS = functools.partial(write_sample_corpus, n_train_sentences=200, n_heldout_sentences=40)


class Trained(Exception):
    """Stands for training: the run got past all its checks."""


@pytest.fixture
def trainings(monkeypatch):
    """Training replaced by writing one checkpoint file and raising `Trained`; the list of save_dirs it got."""
    save_dirs = []

    def train(train_prefix, vocab_file, save_dir, options_file, **kwargs):
        save_dirs.append(save_dir)
        with open(os.path.join(save_dir, "checkpoint.npz"), "w") as f:
            f.write("new")
        raise Trained

    monkeypatch.setattr(quickstart, "write_sample_corpus", SMALL_CORPUS)
    monkeypatch.setattr(quickstart, "train_from_files", train)
    return save_dirs


def _first_run(directory):
    """A first quick start that got as far as its checkpoints (recorded as its own)."""
    with pytest.raises(Trained):
        run_quickstart(str(directory), verbose=0)
    (directory / "checkpoint").mkdir()
    (directory / "checkpoint" / "checkpoint.npz").write_text("first run")
    QuickstartDirectory(str(directory)).record("checkpoint")


def test_quickstart_starts_only_in_a_directory_of_its_own(tmp_path):
    assert prepare_directory(str(tmp_path / "new")) is False and (tmp_path / "new" / MARKER).exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="mine already holds files that the quick start did not write"):
        prepare_directory(str(tmp_path / "mine"))


def test_a_rerun_passes_its_checks_and_keeps_the_earlier_checkpoints_until_its_own_are_complete(
        tmp_path, trainings, capsys):
    directory = tmp_path / "qs"
    _first_run(directory)
    vocab = (directory / "corpus" / "vocab.txt").read_bytes()
    # The same run again, and one with other options: each gets past its checks to training.
    for n_epochs in (8, 2):
        with pytest.raises(Trained):
            run_quickstart(str(directory), n_epochs=n_epochs)
        assert "Starting over in" in capsys.readouterr().out
        # Training failed: the earlier run's checkpoints are still there, and nothing new is left behind.
        assert (directory / "checkpoint" / "checkpoint.npz").read_text() == "first run"
        assert sorted(os.listdir(directory)) == sorted([MARKER, "checkpoint", "corpus", "train_options.json"])
        assert os.listdir(tmp_path) == ["qs"]  # the lock (qs.lock) is gone
    assert len(trainings) == 3 and (directory / "corpus" / "vocab.txt").read_bytes() == vocab
    assert '"n_epochs": 2' in (directory / "train_options.json").read_text()


@pytest.mark.parametrize("change", ["edit the vocabulary", "add to the checkpoints", "put a weight file there"])
def test_a_rerun_refuses_before_any_work_to_replace_what_someone_changed(tmp_path, trainings, change):
    directory = tmp_path / "qs"
    _first_run(directory)
    path = {"edit the vocabulary": directory / "corpus" / "vocab.txt",
            "add to the checkpoints": directory / "checkpoint" / "notes.txt",
            "put a weight file there": directory / "weights.hdf5"}[change]
    path.write_text("mine")
    entry = os.path.join(directory, os.path.relpath(path, directory).split(os.sep)[0])
    with pytest.raises(ValueError, match=f"^{entry} is not as the quick start left it .* Move it out of "
                                         f"{directory}, or pass another --directory"):
        run_quickstart(str(directory), verbose=0)
    assert path.read_text() == "mine" and len(trainings) == 1
    assert (directory / "checkpoint" / "checkpoint.npz").read_text() == "first run"


def test_a_directory_an_earlier_bilm_marked_is_rerun_when_its_corpus_is_the_one_it_writes(tmp_path, trainings):
    # Earlier versions wrote the marker empty and recorded nothing.
    directory = tmp_path / "qs"
    directory.mkdir()
    (directory / MARKER).write_text("")
    SMALL_CORPUS(directory / "corpus")
    with pytest.raises(Trained):
        run_quickstart(str(directory), verbose=0)
    (directory / "checkpoint").mkdir()
    (directory / "checkpoint" / "checkpoint.npz").write_text("unrecorded")
    (directory / MARKER).write_text("")
    with pytest.raises(ValueError, match="checkpoint is not as the quick start left it"):
        run_quickstart(str(directory), verbose=0)


def test_one_quick_start_at_a_time_in_a_directory(tmp_path, trainings):
    held, done = threading.Event(), threading.Event()

    def other():  # stands for another quick start (a thread here: the lock's processes are tested in tests/io)
        with writer_lock(tmp_path / "qs"):
            held.set()
            done.wait(60)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        held.wait(60)
        with pytest.raises(OutputLockedError, match=f"is writing {tmp_path / 'qs'}"):
            run_quickstart(str(tmp_path / "qs"), verbose=0)
    finally:
        done.set()
        thread.join()
    assert trainings == [] and not (tmp_path / "qs").exists()


def test_a_file_in_the_place_of_the_directory_is_a_clear_error(tmp_path):
    (tmp_path / "qs").write_text("x")
    with pytest.raises(ValueError, match="qs: it is a file, not a directory"):
        prepare_directory(str(tmp_path / "qs"))


def test_the_options_are_the_tiny_preset_in_a_small_training_form():
    options = quickstart_options(n_epochs=3)
    assert options["lstm"] == PRESETS["tiny"]["lstm"] and options["char_cnn"]["n_characters"] == 261
    assert (options["n_epochs"], options["batch_size"], options["unroll_steps"]) == (3, 32, 10)
    assert options["n_negative_samples_batch"] == 64
    # Valid training options once the corpus gives the vocabulary and token counts.
    training_settings({**options, "n_tokens_vocab": 100, "n_train_tokens": 10_000})
