"""The quick start's directory and options (the whole run is test_usage_and_cli.py's slow end-to-end test)."""
import pytest

from bilm.presets import PRESETS
from bilm.training.config.settings import training_settings
from bilm.training.quickstart import MARKER, prepare_directory, quickstart_options


def test_quickstart_starts_only_in_a_directory_of_its_own(tmp_path):
    assert prepare_directory(str(tmp_path / "new")) is False and (tmp_path / "new" / ".bilm_quickstart").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="mine already holds files that the quick start did not write"):
        prepare_directory(str(tmp_path / "mine"))


def test_a_rerun_starts_over_without_the_earlier_checkpoints(tmp_path):
    directory = tmp_path / "qs"
    assert prepare_directory(str(directory)) is False
    (directory / "checkpoint").mkdir()
    (directory / "checkpoint" / "model.ckpt-5.index").write_text("x")
    (directory / "corpus").mkdir()
    assert prepare_directory(str(directory)) is True
    assert sorted(p.name for p in directory.iterdir()) == sorted([MARKER, "corpus"])
    assert prepare_directory(str(directory)) is True  # with no checkpoints left, too


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
