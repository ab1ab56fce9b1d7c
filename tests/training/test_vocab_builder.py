import os
import runpy
import sys
import warnings

import pytest

from bilm.text.vocabulary import UnicodeCharsVocabulary, Vocabulary
from bilm.training.data.lm_dataset import LMDataset
from bilm.training.data.vocab_builder import build_vocab
from helpers import ROOT

SCRIPT = os.path.join(ROOT, "bin", "build_vocab.py")


def read_vocab(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read().split("\n")[:-1]


@pytest.fixture
def corpus(tmp_path):
    # Counts: b 3, a 3, c 2, d 1 (across two shards); <UNK> and !!!MAXTERMID are left out.
    (tmp_path / "part-0.txt").write_text("b a c\n\nb <UNK>\n", encoding="utf-8")
    (tmp_path / "part-1.txt").write_text("a b\tc a\n!!!MAXTERMID d\n", encoding="utf-8")
    return str(tmp_path / "part-*.txt")


def test_special_tokens_first_then_by_count_ties_by_string(corpus, tmp_path):
    out = tmp_path / "vocab.txt"
    assert build_vocab(corpus, str(out)) == 7
    assert read_vocab(out) == ["<S>", "</S>", "<UNK>", "a", "b", "c", "d"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-0.txt", "part-1.txt", "vocab.txt"]
    vocab = Vocabulary(str(out), validate_file=True)
    assert vocab.size == 7 and vocab.word_to_id("d") == 6


def test_min_count_and_max_size(corpus, tmp_path):
    out = str(tmp_path / "vocab.txt")
    assert build_vocab(corpus, out, min_count=2) == 6
    assert read_vocab(out) == ["<S>", "</S>", "<UNK>", "a", "b", "c"]
    assert build_vocab(corpus, out, max_size=5, overwrite=True) == 5
    assert read_vocab(out) == ["<S>", "</S>", "<UNK>", "a", "b"]
    assert build_vocab(corpus, out, min_count=3, max_size=100, overwrite=True) == 5
    assert read_vocab(out) == ["<S>", "</S>", "<UNK>", "a", "b"]


@pytest.mark.parametrize("kwargs, message", [({"min_count": 0}, "min_count"), ({"max_size": 2}, "max_size")])
def test_invalid_arguments(corpus, tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_vocab(corpus, str(tmp_path / "vocab.txt"), **kwargs)


def test_no_files_or_no_tokens(tmp_path):
    with pytest.raises(ValueError, match="nothing-"):
        build_vocab(str(tmp_path / "nothing-*"), str(tmp_path / "vocab.txt"))
    (tmp_path / "blank.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="no tokens"):
        build_vocab(str(tmp_path / "blank.txt"), str(tmp_path / "vocab.txt"))
    assert not os.path.exists(tmp_path / "vocab.txt")


def test_invalid_utf8_tokens_round_trip(tmp_path):
    shard = tmp_path / "bytes.txt"
    shard.write_bytes(b"caf\xe9 caf\xe9 x\n")
    out = tmp_path / "vocab.txt"
    with pytest.warns(UserWarning, match="bytes.txt"):
        build_vocab(str(shard), str(out))
    assert out.read_bytes() == b"<S>\n</S>\n<UNK>\ncaf\xe9\nx\n"
    vocab = UnicodeCharsVocabulary(str(out), 8)
    # The same file read again in this process (training after building the vocabulary) warns no more.
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        ids, char_ids = next(LMDataset(str(shard), vocab, test=True).iter_sentences())
    assert not [w for w in again if "bytes.txt" in str(w.message)]
    assert ids.tolist() == [0, 3, 3, 4, 1]  # the raw bytes match, not <UNK>
    assert char_ids[1].tolist() == [258, ord("c"), ord("a"), ord("f"), 0xE9, 259, 260, 260]


def test_script(corpus, tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "vocab.txt")
    argv = ["build_vocab.py", "--train_prefix", corpus, "--vocab_file", out, "--min_count", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(SCRIPT, run_name="__main__")
    assert read_vocab(out) == ["<S>", "</S>", "<UNK>", "a", "b", "c"]
    printed = capsys.readouterr().out.strip()
    assert printed.count("\n") == 0 and "6 tokens" in printed and out in printed


def test_an_existing_file_is_replaced_only_with_overwrite(corpus, tmp_path, monkeypatch, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(ValueError, match="notes.txt already exists.*--overwrite"):
        build_vocab(corpus, str(notes))
    monkeypatch.setattr(sys, "argv", ["build_vocab.py", "--train_prefix", corpus, "--vocab_file", str(notes)])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(SCRIPT, run_name="__main__")
    assert "Error:" in str(exited.value) and "--overwrite" in str(exited.value)
    assert notes.read_text() == "my notes\n"
    monkeypatch.setattr(sys, "argv", sys.argv + ["--overwrite"])
    runpy.run_path(SCRIPT, run_name="__main__")
    assert read_vocab(notes) == ["<S>", "</S>", "<UNK>", "a", "b", "c", "d"]
