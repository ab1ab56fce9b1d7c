"""Fixtures of the training-data tests (shards, windows, tf.data): a char vocabulary and a one-shard corpus.

Modules that train on another corpus define their own `corpus` fixture, which takes precedence.
"""
import pytest

from bilm.text.vocabulary import UnicodeCharsVocabulary
from helpers import write_shard, write_vocab
from training_helpers import LINES, TOKENS, C


@pytest.fixture
def vocab(tmp_path):
    return UnicodeCharsVocabulary(write_vocab(tmp_path, TOKENS), C)


@pytest.fixture
def corpus(tmp_path):
    write_shard(tmp_path, "shard0.txt", LINES)
    return str(tmp_path / "shard*.txt")


# Sentences the boundary state is measured on at the end of each training call in these tests (the library
# measures at most 1,000: `bilm.models.boundary_state.DEFAULT_N_SENTENCES`). The measure itself, with its
# default and other counts, is tested in test_prediction_network.py and tests/models/test_boundary_state.py;
# here it only has to run, be saved and restart exactly, which 200 sentences show as well as 1,000.
END_OF_RUN_BOUNDARY_SENTENCES = 200


@pytest.fixture(autouse=True)
def _short_end_of_run_boundary_measure(monkeypatch):
    import functools

    from bilm.training.arrays import training_run
    from bilm.training.arrays.boundary_state_measure import measure_boundary_state

    monkeypatch.setattr(training_run, "measure_boundary_state",
                        functools.partial(measure_boundary_state, n_sentences=END_OF_RUN_BOUNDARY_SENTENCES))
