"""One way of reading text: training shards and sentence files see the same lines and the same warning."""
import warnings

import pytest

from bilm.errors import UserError
from bilm.io.formats.sentence_files import read_sentences
from bilm.io.formats.text_files import read_text_lines
from bilm.training.data.shards import read_lines


def test_lines_numbers_line_ends_and_invalid_bytes(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"caf\xc3\xa9 ok\r\nbad \xff byte\n\n  \nlast \xfe")
    with pytest.warns(UserWarning, match=r"mixed.txt is not valid UTF-8 \(first at line 2\)") as record:
        lines = list(read_text_lines(path))
    assert len(record) == 1  # once per file, though two lines hold invalid bytes
    assert lines == [(0, "café ok"), (1, "bad \udcff byte"), (2, ""), (3, "  "), (4, "last \udcfe")]
    # The invalid bytes come back unchanged.
    assert lines[1][1].encode("utf-8", "surrogateescape") == b"bad \xff byte"


def test_shards_and_sentence_files_read_the_same_lines(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"a b\r\n\nc \xff\n d e \n")
    with warnings.catch_warnings(record=True) as shard_warnings:
        warnings.simplefilter("always")
        shard = list(read_lines(str(path)))
    with warnings.catch_warnings(record=True) as sentence_warnings:
        warnings.simplefilter("always")
        sentences = list(read_sentences(str(path)))
    assert shard == [line for _, line, tokens in sentences if tokens]  # shards skip blank lines
    assert [n for n, _, _ in sentences] == [0, 1, 2, 3]
    assert len(shard_warnings) == len(sentence_warnings) == 1
    assert "(first at line 3)" in str(shard_warnings[0].message)
    assert "map to <UNK> unless the vocabulary holds the same bytes" in str(shard_warnings[0].message)
    assert "(first at line 3)" in str(sentence_warnings[0].message)
    assert list(read_lines(str(path), warn_invalid_utf8=False)) == shard


def test_a_file_read_twice_warns_once(tmp_path):
    path = tmp_path / "twice.txt"
    path.write_bytes(b"ok\nbad \xff\n")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        list(read_sentences(str(path)))
        list(read_sentences(str(path)))
    assert len(record) == 1


def test_a_binary_file_is_one_clear_error(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"text first\n\x00\x01\x02\x89HDF\n")
    with pytest.raises(UserError, match=r"model.bin line 2 holds a NUL byte: it is a binary file, not text"):
        list(read_sentences(str(path)))
