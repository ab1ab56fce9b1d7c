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
