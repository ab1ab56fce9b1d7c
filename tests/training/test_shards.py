"""Shards on disk: a pattern that matches nothing is an error naming it; count_tokens counts whitespace tokens."""
import pytest

from bilm.training.data.lm_dataset import LMDataset
from bilm.training.data.shards import count_tokens
from helpers import write_shard


def test_pattern_matching_nothing(tmp_path, vocab):
    pattern = str(tmp_path / "missing-*.txt")
    with pytest.raises(ValueError, match="missing-"):
        LMDataset(pattern, vocab)
    with pytest.raises(ValueError, match="missing-"):
        count_tokens(pattern)


def test_count_tokens(tmp_path):
    write_shard(tmp_path, "c0.txt", ["a b c", "", "  d\te  "])
    write_shard(tmp_path, "c1.txt", ["x"])
    assert count_tokens(str(tmp_path / "c*.txt")) == 6


def test_a_directory_as_the_pattern_says_to_match_its_files(tmp_path):
    write_shard(tmp_path, "c0.txt", ["a b c"])
    with pytest.raises(ValueError, match=f"'{tmp_path}' is a directory; give a pattern of its files, e.g. "
                                         f"'{tmp_path}/\\*'"):
        count_tokens(str(tmp_path))
