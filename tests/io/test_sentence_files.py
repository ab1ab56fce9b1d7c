"""Sentence files: line counts, decoding, and batches by length under a size or a token budget."""
import pytest

from bilm.io.formats.sentence_files import BULK_MAX_TOKENS, count_lines, length_sorted_batches, read_sentences


def test_lines_are_counted_and_read_with_their_tokens(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"a b\r\n\ncaf\xe9 x\nlast")
    assert count_lines(str(path)) == 4
    assert [(n, tokens) for n, _, tokens in read_sentences(str(path))] == [
        (0, ["a", "b"]), (1, []), (2, ["caf\udce9", "x"]), (3, ["last"])]


def _items(lengths):
    return [(i, ["w"] * n) for i, n in enumerate(lengths)]


def test_fixed_batches_are_sorted_by_length_within_a_chunk():
    batches = list(length_sorted_batches(_items([3, 1, 2, 5, 4]), batch_size=2, tokens_of=lambda x: x[1],
                                         chunk_batches=2))
    assert [[i for i, _ in b] for b in batches] == [[1, 2], [0, 3], [4]]


def test_a_token_budget_fills_each_batch_up_to_the_budget():
    lengths = [8, 3, 3, 18, 3, 8, 38, 3]
    batches = list(length_sorted_batches(_items(lengths), max_tokens=40, tokens_of=lambda x: x[1]))
    assert sorted(i for b in batches for i, _ in b) == list(range(len(lengths)))
    for batch in batches:
        rows, longest = len(batch), max(len(tokens) for _, tokens in batch)
        assert rows * (longest + 2) <= 40 or rows == 1
    # Four 3-token sentences fill 4 * 5 = 20 tokens; the two 8-token ones 2 * 10.
    assert [len(b) for b in batches] == [4, 2, 1, 1]
    default = list(length_sorted_batches(_items([25] * 300), tokens_of=lambda x: x[1]))
    assert len(default[0]) == BULK_MAX_TOKENS // 27
    with pytest.raises(ValueError, match="batch_size or max_tokens, not both"):
        list(length_sorted_batches(_items([1]), batch_size=2, max_tokens=10))


def test_invalid_utf8_is_kept_as_surrogates_and_warns_once_naming_the_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9 au lait\nfine line\nna\xefve\n")
    with pytest.warns(UserWarning, match=r"latin1.txt is not valid UTF-8 \(first at line 1\)") as record:
        lines = list(read_sentences(str(path)))
    assert len(record) == 1
    assert lines[0][2] == ["caf\udce9", "au", "lait"] and lines[2][2] == ["na\udcefve"]
