import numpy as np
import pytest

from bilm.text.vocabulary import (
    UnicodeCharsVocabulary,
    UnknownTokenError,
    Vocabulary,
    token_to_char_ids,
    tokens_to_char_ids,
)
from helpers import write_lines

PAD = 260


@pytest.fixture
def vocab_file(tmp_path):
    return write_lines(tmp_path, ["<S>", "</S>", "<UNK>", "the", "cat", "é", "!!!MAXTERMID", "sat"])


# --- token_to_char_ids -------------------------------------------------------


@pytest.mark.parametrize(
    "token, expected",
    [
        ("th", [258, 116, 104, 259, 260]),
        ("thhhhh", [258, 116, 104, 104, 259]),
        (chr(256) + "t", [258, 196, 128, 116, 259]),
    ],
)
def test_spec_examples(token, expected):
    row = token_to_char_ids(token, 5)
    assert row.dtype == np.int32
    assert row.tolist() == expected


def test_multibyte_utf8_is_truncated_bytewise():
    # 'é' is c3 a9; '中文' is e4 b8 ad e6 96 87; the emoji is f0 9f 98 80.
    assert token_to_char_ids("é", 6).tolist() == [258, 0xC3, 0xA9, 259, PAD, PAD]
    assert token_to_char_ids("中文", 8).tolist() == [258, 0xE4, 0xB8, 0xAD, 0xE6, 0x96, 0x87, 259]
    # 4 bytes fit: the second character is cut after its first byte.
    assert token_to_char_ids("中文", 6).tolist() == [258, 0xE4, 0xB8, 0xAD, 0xE6, 259]
    assert token_to_char_ids("\U0001F600", 5).tolist() == [258, 0xF0, 0x9F, 0x98, 259]


def test_long_token_keeps_first_bytes_and_ends_with_end_of_word():
    row = token_to_char_ids("a" * 100, 50)
    assert row.shape == (50,)
    assert row[0] == 258 and row[-1] == 259
    assert (row[1:49] == ord("a")).all()


def test_empty_token_and_bytes_token():
    assert token_to_char_ids("", 4).tolist() == [258, 259, PAD, PAD]
    assert token_to_char_ids(b"", 4).tolist() == [258, 259, PAD, PAD]
    # bytes are used as they are, even when they are not valid UTF-8.
    assert token_to_char_ids(b"\xff\x00a", 6).tolist() == [258, 255, 0, 97, 259, PAD]


def test_surrogateescape_tokens_map_back_to_their_bytes():
    raw = b"a\xffb\xc3"
    token = raw.decode("utf-8", "surrogateescape")
    assert token_to_char_ids(token, 7).tolist() == [258, 97, 255, 98, 0xC3, 259, PAD]
    # Other lone surrogates cannot be encoded and are dropped.
    assert token_to_char_ids("a\ud800\udcffb", 6).tolist() == [258, 97, 255, 98, 259, PAD]


def test_max_characters_must_be_at_least_3():
    assert token_to_char_ids("abc", 3).tolist() == [258, 97, 259]
    with pytest.raises(ValueError, match="at least 3"):
        token_to_char_ids("a", 2)


def test_token_must_be_str_or_bytes():
    with pytest.raises(TypeError, match="str or bytes"):
        token_to_char_ids(5, 10)


def test_tokens_to_char_ids_matches_one_by_one():
    tokens = ["", "a", "中文", "x" * 30, b"\xff", "\udcfe", "\U0001F600z"]
    table = tokens_to_char_ids(tokens, 7)
    assert table.shape == (len(tokens), 7) and table.dtype == np.int32
    for row, token in zip(table, tokens):
        np.testing.assert_array_equal(row, token_to_char_ids(token, 7))
    assert tokens_to_char_ids([], 7).shape == (0, 7)


# --- Vocabulary ----------------------------------------------------------------


def test_vocabulary_ids_and_maxtermid_skipped(vocab_file):
    vocab = Vocabulary(vocab_file)
    assert (vocab.bos, vocab.eos, vocab.unk) == (0, 1, 2)
    assert vocab.size == 7
    assert vocab.word_to_id("sat") == 6  # the !!!MAXTERMID line takes no id
    assert vocab.word_to_id("!!!MAXTERMID") == vocab.unk
    assert vocab.id_to_word(5) == "é"
    assert vocab.decode([3, 4, 6]) == "the cat sat"


def test_unknown_tokens_map_to_unk(vocab_file):
    vocab = Vocabulary(vocab_file)
    assert vocab.word_to_id("dog") == 2
    np.testing.assert_array_equal(vocab.encode("the dog sat"), [0, 3, 2, 6, 1])


def test_unknown_token_without_unk_line_names_token_and_file(tmp_path):
    path = write_lines(tmp_path, ["<S>", "</S>", "the"])
    vocab = Vocabulary(path)
    assert vocab.unk == -1
    with pytest.raises(KeyError) as info:
        vocab.word_to_id("dog")
    assert isinstance(info.value, UnknownTokenError)
    message = str(info.value)
    assert "'dog'" in message and path in message and "<UNK>" in message


def test_encode_split_and_reverse(vocab_file):
    vocab = Vocabulary(vocab_file)
    ids = vocab.encode("the  cat\tsat")
    assert ids.dtype == np.int32
    assert ids.tolist() == [0, 3, 4, 6, 1]
    assert vocab.encode(["the", "cat"], split=False).tolist() == [0, 3, 4, 1]
    # reverse: the sentence is already reversed; only the frame is swapped.
    assert vocab.encode("sat cat", reverse=True).tolist() == [1, 6, 4, 0]
    assert vocab.encode("").tolist() == [0, 1]


def test_encode_without_boundary_tokens_raises(tmp_path):
    path = write_lines(tmp_path, ["<UNK>", "the"])
    vocab = Vocabulary(path)
    assert (vocab.bos, vocab.eos) == (-1, -1)
    with pytest.raises(ValueError, match="<S> and </S>") as info:
        vocab.encode("the")
    assert path in str(info.value)


@pytest.mark.parametrize(
    "lines, missing",
    [
        (["<S>", "</S>", "the"], ["<UNK>"]),
        (["<UNK>", "the"], ["<S>", "</S>"]),
        (["the"], ["<S>", "</S>", "<UNK>"]),
    ],
)
def test_validate_file_names_missing_tokens(tmp_path, lines, missing):
    path = write_lines(tmp_path, lines)
    with pytest.raises(ValueError) as info:
        Vocabulary(path, validate_file=True)
    message = str(info.value)
    assert path in message and "Add" in message
    for token in missing:
        assert token in message
    present = {"<S>", "</S>", "<UNK>"} - set(missing)
    assert f"lacks {', '.join(missing)}." in message
    assert all(f"lacks {token}" not in message for token in present)


def test_validate_file_accepts_complete_file(vocab_file):
    assert Vocabulary(vocab_file, validate_file=True).size == 7


@pytest.mark.parametrize("lines, message", [
    (["the", "a", "<S>", "</S>", "<UNK>"], "starts with the, a, <S>; training needs <S>, </S> and <UNK> as the first"),
    (["<S>", "</S>", "the", "<UNK>"], "starts with <S>, </S>, the; training needs"),
    (["<S>", "</S>", "<UNK>", "the", "a", "the", "b", "a"], "lists 'the' twice, on lines 4 and 6 \\(1 more"),
    (["<S>", "</S>", "<UNK>", "!!!MAXTERMID", "<S>"], "lists '<S>' twice, on lines 1 and 5"),
])
def test_validate_file_needs_the_specials_first_and_each_token_once(tmp_path, lines, message):
    path = write_lines(tmp_path, lines)
    with pytest.raises(ValueError, match=message) as info:
        Vocabulary(path, validate_file=True)
    assert path in str(info.value)
    assert Vocabulary(path).size == len(lines) - lines.count("!!!MAXTERMID")  # prediction reads it as before


def test_validate_file_takes_the_specials_in_any_order(tmp_path):
    assert Vocabulary(write_lines(tmp_path, ["</S>", "<S>", "<UNK>", "the"]), validate_file=True).eos == 0


def test_the_fingerprint_tells_vocabularies_apart_by_tokens_and_order(tmp_path):
    def fingerprint(lines, name):
        return Vocabulary(write_lines(tmp_path, lines, name)).fingerprint

    base = fingerprint(["<S>", "</S>", "<UNK>", "the", "a"], "a.txt")
    assert base == fingerprint(["<S>", "</S>", "  <UNK>", "!!!MAXTERMID", "the", "a"], "b.txt")
    assert base != fingerprint(["<S>", "</S>", "<UNK>", "a", "the"], "c.txt")
    assert base != fingerprint(["<S>", "</S>", "<UNK>", "the", "an"], "d.txt")
    assert -2 ** 63 <= base < 2 ** 63


def test_missing_file_names_the_path(tmp_path):
    path = str(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        Vocabulary(path)


def test_lines_are_stripped_and_read_as_utf8(tmp_path):
    path = tmp_path / "v.txt"
    path.write_bytes("<S>\r\n</S>  \n中文\n".encode("utf-8") + b"\xffx\n")
    vocab = Vocabulary(path)
    assert vocab.size == 4
    assert (vocab.bos, vocab.eos) == (0, 1)
    assert vocab.word_to_id("中文") == 2
    # An invalid byte survives as a surrogate escape and converts back to it.
    chars = UnicodeCharsVocabulary(path, 5)
    assert chars.word_char_ids[3].tolist() == [258, 255, ord("x"), 259, PAD]


def test_id_to_word_out_of_range(vocab_file):
    with pytest.raises(IndexError, match="out of range"):
        Vocabulary(vocab_file).id_to_word(7)


# --- UnicodeCharsVocabulary -------------------------------------------------------


def test_word_char_ids_table(vocab_file):
    vocab = UnicodeCharsVocabulary(vocab_file, 6)
    assert vocab.max_word_length == 6
    table = vocab.word_char_ids
    assert table.shape == (7, 6) and table.dtype == np.int32
    assert table[0].tolist() == [258, 256, 259, PAD, PAD, PAD]  # <S>
    assert table[1].tolist() == [258, 257, 259, PAD, PAD, PAD]  # </S>
    assert table[2].tolist() == [258, 60, 85, 78, 75, 259]  # '<UNK' + end of word
    assert table[5].tolist() == [258, 0xC3, 0xA9, 259, PAD, PAD]  # é
    np.testing.assert_array_equal(vocab.bos_chars, table[0])
    np.testing.assert_array_equal(vocab.eos_chars, table[1])


def test_word_to_char_ids_in_and_out_of_vocab(vocab_file):
    vocab = UnicodeCharsVocabulary(vocab_file, 6)
    np.testing.assert_array_equal(vocab.word_to_char_ids("cat"), vocab.word_char_ids[4])
    assert vocab.word_to_char_ids("dog").tolist() == [258, 100, 111, 103, 259, PAD]
    assert vocab.word_to_char_ids(b"dog").tolist() == [258, 100, 111, 103, 259, PAD]


def test_boundary_rows_without_boundary_lines(tmp_path):
    # The file lacks <S> / </S>: the table is unchanged (its last row is not
    # overwritten) and the boundary tokens still get the boundary rows.
    vocab = UnicodeCharsVocabulary(write_lines(tmp_path, ["ab"]), 5)
    assert vocab.word_char_ids.tolist() == [[258, 97, 98, 259, PAD]]
    assert vocab.word_to_char_ids("<S>").tolist() == [258, 256, 259, PAD, PAD]
    assert vocab.word_to_char_ids("</S>").tolist() == [258, 257, 259, PAD, PAD]


def test_encode_chars(vocab_file):
    vocab = UnicodeCharsVocabulary(vocab_file, 5)
    chars = vocab.encode_chars("the xy")
    assert chars.shape == (4, 5) and chars.dtype == np.int32
    assert chars.tolist() == [
        [258, 256, 259, PAD, PAD],
        [258, 116, 104, 101, 259],
        [258, 120, 121, 259, PAD],
        [258, 257, 259, PAD, PAD],
    ]
    np.testing.assert_array_equal(vocab.encode_chars(["the", "xy"], split=False), chars)
    reverse = vocab.encode_chars("the xy", reverse=True)
    np.testing.assert_array_equal(reverse[0], vocab.eos_chars)
    np.testing.assert_array_equal(reverse[-1], vocab.bos_chars)
    np.testing.assert_array_equal(reverse[1:-1], chars[1:-1])
    assert vocab.encode_chars("").tolist() == [vocab.bos_chars.tolist(), vocab.eos_chars.tolist()]


def test_chars_vocabulary_validates(tmp_path):
    path = write_lines(tmp_path, ["<S>", "</S>"])
    with pytest.raises(ValueError, match="<UNK>"):
        UnicodeCharsVocabulary(path, 50, validate_file=True)
    with pytest.raises(ValueError, match="at least 3"):
        UnicodeCharsVocabulary(path, 2)
