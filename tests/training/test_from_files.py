"""What the training scripts call: the default options, the data from files, and train_from_files' options.

`train` itself is replaced by a stand-in that records its arguments: the
training run is tested in test_loop.py, the scripts end to end in
tests/commands/test_training.py.
"""
import dataclasses
import json
import os

import pytest

import bilm.training.config.training_config as training_config
import bilm.training.run.from_files as from_files
from bilm.backend import trainer_module
from bilm.errors import UserError
from bilm.presets import training_options
from bilm.training.config.training_config import data_fingerprints
from bilm.training.data.lm_dataset import BidirectionalLMDataset, LMDataset
from bilm.training.data.shards import count_tokens
from bilm.training.run import run_checkpoint
from bilm.training.run.from_files import load_training_data, train_from_files
from helpers import write_vocab
from tensorflow_reference.checkpoints import CheckpointError, data_fingerprint
from training_helpers import MAX_CHARS, WORDS, tiny_options, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), n_train=30, n_heldout=5)


@pytest.fixture
def train_calls(monkeypatch):
    """Makes the run record `(options, data, n_gpus, save_dir, log_dir, kwargs)` instead of training, with
    `train`'s keyword arguments: those of its `LoopSettings`, `restart_ckpt_file` and `data_source` taken from
    its `TrainingConfig`, the others as given."""
    calls = []

    def run_training(config, data, n_gpus, save_dir, log_dir, loop_settings, **kwargs):
        kwargs.update(dataclasses.asdict(loop_settings), restart_ckpt_file=config.origin.checkpoint,
                      data_source=config.data_source, data_fingerprints=config.data_fingerprints)
        calls.append((config.options, data, n_gpus, save_dir, log_dir, kwargs))
        return {"step": 0}

    monkeypatch.setattr(from_files, "run_training", run_training)
    return calls


def _options_file(tmp_path, **changes):
    options = tiny_options(**changes)
    for key in ("n_tokens_vocab", "n_train_tokens"):
        options.pop(key)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    return str(path)


@pytest.mark.parametrize("char, bidirectional", [(True, True), (True, False), (False, True)])
def test_the_data_is_both_streams_or_one_with_the_vocabulary_the_options_need(corpus, char, bidirectional):
    options = tiny_options(char=char, bidirectional=bidirectional)
    data, vocab = load_training_data(options, corpus["train"], corpus["vocab"], seed=3)
    assert isinstance(data, BidirectionalLMDataset if bidirectional else LMDataset)
    assert vocab.size == len(WORDS) + 3 and data.max_word_length == (MAX_CHARS if char else None)
    stream = data.forward if bidirectional else data
    assert (stream.test, stream.shuffle_on_load, stream.seed) == (False, True, 3)
    heldout, _ = load_training_data(options, corpus["heldout"], corpus["vocab"], test=True)
    stream = heldout.forward if bidirectional else heldout
    assert stream.test and not stream.shuffle_on_load


def test_options_come_from_the_file_the_flags_and_the_data(tmp_path, corpus, train_calls, capsys):
    save_dir = tmp_path / "ckpt"
    train_from_files(corpus["train"], corpus["vocab"], save_dir, _options_file(tmp_path), n_epochs=2, batch_size=4,
                     matmul_dtype="bfloat16", heldout_prefix=corpus["heldout"], seed=7, max_steps=1)
    ((options, data, n_gpus, got_save_dir, log_dir, kwargs),) = train_calls
    assert (options.get("n_epochs"), options.get("batch_size"), options.get("matmul_dtype")) == (2, 4, "bfloat16")
    assert options.get("n_tokens_vocab") == len(WORDS) + 3
    assert options.get("n_train_tokens") == count_tokens(corpus["train"])
    assert f"Counted {count_tokens(corpus['train']):,} tokens in {corpus['train']}." in capsys.readouterr().out
    assert isinstance(data, BidirectionalLMDataset) and data.seed == 7
    assert (n_gpus, got_save_dir, log_dir) == (1, save_dir, os.path.join(str(save_dir), "logs"))
    assert kwargs["heldout_data"].forward.test and kwargs["restart_ckpt_file"] is None
    assert kwargs["data_source"] == corpus["train"]
    assert kwargs["data_fingerprints"] == data_fingerprints(data)
    assert (kwargs["seed"], kwargs["max_steps"]) == (7, 1)


@pytest.mark.parametrize("size, lstm_dim", [("small", 1024), ("original", 4096)])
def test_a_size_trains_its_released_options_with_the_original_recipe(tmp_path, corpus, train_calls, monkeypatch,
                                                                      size, lstm_dim):
    monkeypatch.setattr(training_config, "count_tokens", lambda prefix: pytest.fail("n_train_tokens was given"))
    train_from_files(corpus["train"], corpus["vocab"], tmp_path / "ckpt", size=size, n_train_tokens=1000,
                     overrides={"dropout": 0.25, "learning_rate": None}, verbose=0)
    options = train_calls[0][0]
    expected = training_options(size, n_train_tokens=1000, n_tokens_vocab=len(WORDS) + 3, dropout=0.25)
    assert options.lstm_dim == lstm_dim and options.to_dict() == expected


def test_the_model_is_an_options_file_or_a_size_and_a_failed_run_leaves_no_save_dir(tmp_path, corpus, train_calls):
    save_dir = tmp_path / "ckpt"
    with pytest.raises(UserError, match="--options_file.*or a released size.*--size"):
        train_from_files(corpus["train"], corpus["vocab"], save_dir, verbose=0)
    with pytest.raises(UserError, match="either an options file .* or a size .*not both"):
        train_from_files(corpus["train"], corpus["vocab"], save_dir, _options_file(tmp_path), size="small")
    with pytest.raises(FileNotFoundError):
        train_from_files(corpus["train"], str(tmp_path / "no_vocab.txt"), save_dir, size="small", verbose=0)
    assert not save_dir.exists() and train_calls == []


def _write_checkpoint(save_dir, options, data_source):
    """A save_dir as train leaves it, as far as a restart reads it: options.json and the data position."""
    os.makedirs(save_dir)
    with open(os.path.join(save_dir, "options.json"), "w") as f:
        json.dump(options, f)
    return run_checkpoint.save_checkpoint(save_dir, {}, 5, options, 0, data_batches=5,
                                          data_source=data_fingerprint(data_source))


def test_a_restart_counts_the_tokens_again_only_on_other_data(tmp_path, corpus, train_calls, monkeypatch):
    save_dir = str(tmp_path / "ckpt")
    checkpoint = _write_checkpoint(save_dir, tiny_options(n_train_tokens=123), os.path.abspath(corpus["train"]))
    counted = []
    monkeypatch.setattr(training_config, "count_tokens", lambda prefix: counted.append(prefix) or 456)
    train_from_files(corpus["train"], corpus["vocab"], save_dir, restart=True, verbose=0)
    assert train_calls[-1][0].get("n_train_tokens") == 123 and counted == []
    assert train_calls[-1][5]["restart_ckpt_file"] == checkpoint
    train_from_files(corpus["heldout"], corpus["vocab"], save_dir, restart=True, verbose=0)
    assert train_calls[-1][0].get("n_train_tokens") == 456 and counted == [corpus["heldout"]]


def test_a_restart_knows_its_corpus_spelled_another_way_or_moved_and_not_a_changed_one(tmp_path, corpus, train_calls,
                                                                                      monkeypatch):
    # The first run read the corpus by an absolute pattern; its checkpoint records the stream's fingerprint.
    save_dir = str(tmp_path / "ckpt")
    data = load_training_data(tiny_options(), corpus["train"], corpus["vocab"], seed=0)[0]
    os.makedirs(save_dir)
    (tmp_path / "ckpt" / "options.json").write_text(json.dumps(tiny_options(n_train_tokens=123)))
    run_checkpoint.save_checkpoint(save_dir, {}, 5, tiny_options(n_train_tokens=123), 0, data_batches=5,
                                   data_source=data_fingerprints(data)[0])
    counted = []
    monkeypatch.setattr(training_config, "count_tokens", lambda prefix: counted.append(prefix) or 456)
    # The same shards copied to another machine's folder, named by a relative pattern from another directory.
    moved = tmp_path / "elsewhere" / "corpus"
    moved.mkdir(parents=True)
    for name in ("train_0.txt", "train_1.txt", "vocab.txt"):
        (moved / name).write_bytes(open(os.path.join(os.path.dirname(corpus["train"]), name), "rb").read())
    monkeypatch.chdir(tmp_path / "elsewhere")
    train_from_files("corpus/./train_*.txt", "corpus/vocab.txt", save_dir, restart=True, verbose=0)
    assert train_calls[-1][0].get("n_train_tokens") == 123 and counted == []
    assert train_calls[-1][5]["data_fingerprints"][0] == data_fingerprints(data)[0]
    # A shard changed (a sentence appended) is new data: its tokens are counted and its stream starts anew.
    with open(moved / "train_1.txt", "a") as f:
        f.write("the cat\n")
    train_from_files("corpus/train_*.txt", "corpus/vocab.txt", save_dir, restart=True, verbose=0)
    assert train_calls[-1][0].get("n_train_tokens") == 456 and counted == ["corpus/train_*.txt"]
    # So is a shard more or fewer.
    counted.clear()
    train_from_files("corpus/train_0.txt", "corpus/vocab.txt", save_dir, restart=True, verbose=0)
    assert counted == ["corpus/train_0.txt"]


def test_a_restart_with_another_vocabulary_is_a_clear_error(tmp_path, corpus, train_calls):
    save_dir = str(tmp_path / "ckpt")
    _write_checkpoint(save_dir, tiny_options(), os.path.abspath(corpus["train"]))
    other_vocab = write_vocab(tmp_path, WORDS[:5])
    with pytest.raises(CheckpointError, match=rf"{other_vocab} has 8 tokens but the checkpoint in {save_dir} was "
                                              r"trained with n_tokens_vocab=23; restart with the training vocabulary"):
        train_from_files(corpus["train"], other_vocab, save_dir, restart=True, verbose=0)
    assert train_calls == []


def test_run_test_evaluates_the_latest_checkpoint_on_the_test_files_in_order(tmp_path, corpus, monkeypatch):
    save_dir = str(tmp_path / "ckpt")
    checkpoint = _write_checkpoint(save_dir, tiny_options(), os.path.abspath(corpus["train"]))
    calls = []
    monkeypatch.setattr(trainer_module(), "evaluate_checkpoint",
                        lambda *args: calls.append(args) or 12.5)
    assert from_files.evaluate_from_files(corpus["heldout"], corpus["vocab"], save_dir, batch_size=3, verbose=0,
                                          start="warm") == 12.5
    (meta, options, data, batch_size, verbose, start), = calls
    assert options.get("n_tokens_vocab") == len(WORDS) + 3 and meta["path"] == checkpoint
    assert data.forward.test and data.forward.filepattern == corpus["heldout"]
    assert (batch_size, verbose, start) == (3, 0, "warm")
    # By default the run's own batch size, as training's held-out evaluation.
    from_files.evaluate_from_files(corpus["heldout"], corpus["vocab"], save_dir, verbose=0)
    assert calls[-1][3] == tiny_options()["batch_size"] == 16


@pytest.mark.slow
def test_a_checkpoint_refuses_a_vocabulary_it_was_not_trained_with(tmp_path, corpus):
    save_dir = str(tmp_path / "ckpt")
    options_file = _options_file(tmp_path)
    train_from_files(corpus["train"], corpus["vocab"], save_dir, options_file, n_train_tokens=16 * 5 * 2,
                     n_epochs=1, verbose=0)
    reordered = write_vocab(tmp_path, WORDS[::-1], name="reordered.txt")
    larger = write_vocab(tmp_path, WORDS + ["extra", "words"], name="larger.txt")
    same_size = "other tokens or another order"
    with pytest.raises(CheckpointError, match=f"reordered.txt is not the vocabulary .* was trained with.*{same_size}"):
        train_from_files(corpus["train"], reordered, save_dir, restart=True, verbose=0)
    with pytest.raises(CheckpointError, match=f"reordered.txt is not the vocabulary .*{same_size}"):
        from_files.evaluate_from_files(corpus["heldout"], reordered, save_dir, batch_size=2, verbose=0)
    with pytest.raises(CheckpointError, match="larger.txt has 25 tokens but .* trained with a vocabulary of 23"):
        from_files.evaluate_from_files(corpus["heldout"], larger, save_dir, batch_size=2, verbose=0)
    assert from_files.evaluate_from_files(corpus["heldout"], corpus["vocab"], save_dir, batch_size=2, verbose=0) > 1


def test_test_from_files_is_a_deprecated_alias_of_evaluate_from_files(tmp_path, corpus, monkeypatch):
    import bilm.training

    calls = []
    monkeypatch.setattr(from_files, "evaluate_from_files", lambda *args: calls.append(args) or 12.5)
    with pytest.warns(DeprecationWarning, match=r"test_from_files is deprecated; use "
                                                r"bilm.training.evaluate_from_files"):
        assert bilm.training.test_from_files("held.txt", "vocab.txt", "ckpt", 3, verbose=0, start="warm") == 12.5
    assert calls == [("held.txt", "vocab.txt", "ckpt", 3, 0, "warm")]
