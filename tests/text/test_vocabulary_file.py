"""The vocabulary file's one reader and one writer agree: what is written reads back as it was."""
import pytest

from bilm.text.vocabulary_file import read_vocabulary_file, write_vocabulary_file


def test_tokens_read_back_as_written_invalid_utf8_included(tmp_path):
    tokens = ["<S>", "</S>", "<UNK>", "the", "é", "caf\udce9", "日本"]  # "caf\xe9" in Latin-1 bytes
    path = tmp_path / "vocab.txt"
    write_vocabulary_file(path, tokens)
    assert path.read_bytes().splitlines()[5] == b"caf\xe9"
    lines = read_vocabulary_file(path)
    assert lines.tokens == tokens and lines.repeated == []


def test_the_reader_skips_maxtermid_strips_lines_and_lists_repeats(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"<S>\n  the \r\n!!!MAXTERMID\ncat\nthe\n")
    lines = read_vocabulary_file(path)
    assert lines.tokens == ["<S>", "the", "cat", "the"]
    assert lines.repeated == [("the", 2, 5)]


@pytest.mark.parametrize("token", ["", " the", "a\nb", "!!!MAXTERMID"])
def test_the_writer_refuses_a_token_that_would_not_read_back(tmp_path, token):
    with pytest.raises(ValueError, match="cannot be a line of a vocabulary file"):
        write_vocabulary_file(tmp_path / "vocab.txt", ["<S>", token])


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_vocabulary_file(tmp_path / "missing.txt")
