"""Adapting an ELMoForManyLangs model (train(..., init_from=FOLDER), bin/train_elmo.py --init_from): the training
text is read through the model's own character and word dictionaries, its token embedder (word embedding and
char CNN) trains, and the result is an ordinary bilm run (restart exact, dump_weights, bilm.load)."""
import json
import os

import h5py
import numpy as np
import pytest

import bilm
import efml_models as M
from bilm.io.sources.model_files import locate_model
from bilm.options import load_options
from bilm.training import dump_weights, train_from_files
from bilm.training import evaluate_from_files as heldout_perplexity
from bilm.training.data.lm_dataset import vocabulary_for
from bilm.training.model.adaptation import adaptation_options, open_model_to_adapt
from training_helpers import checkpoint_arrays, small_softmax_fit

# Words the model knows, and new ones (unknown words, characters outside its dictionary).
TEXT_WORDS = ["the", "cat", "sat", "a", "dog", "中文", "hat", "zebra", "ran", "äcorn"]
TRAINING_KEYS = {"batch_size": 4, "unroll_steps": 5, "n_negative_samples_batch": 6, "dropout": 0.0,
                 "learning_rate": 0.3, "n_epochs": 50}


def _write_text(directory, n_lines, seed):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_lines):
        start = int(rng.integers(len(TEXT_WORDS)))
        lines.append(" ".join(TEXT_WORDS[(start + i) % len(TEXT_WORDS)] for i in range(int(rng.integers(3, 8)))))
    path = directory / f"text_{seed}.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def efml(tmp_path_factory):
    root = tmp_path_factory.mktemp("efml_adapt")
    folder = root / "xx.model"
    M.write_model(folder, "legacy", seed=4)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["<S>", "</S>", "<UNK>", *TEXT_WORDS]) + "\n", encoding="utf-8")
    options_file = root / "train_options.json"
    options_file.write_text(json.dumps(TRAINING_KEYS))
    return {"folder": str(folder), "vocab": str(vocab), "train": _write_text(root, 200, seed=1),
            "heldout": _write_text(root, 20, seed=2), "options": str(options_file), "root": root}


@pytest.fixture(autouse=True)
def _small_softmax_fit(monkeypatch):
    small_softmax_fit(monkeypatch)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BILM_CACHE", str(tmp_path / "cache"))


def _train(efml, save_dir, **kwargs):
    return train_from_files(efml["train"], efml["vocab"], save_dir, efml["options"], init_from=efml["folder"],
                            verbose=0, **kwargs)


def test_the_training_text_is_read_through_the_models_dictionaries(efml):
    model = open_model_to_adapt(efml["folder"])
    options = adaptation_options(model, efml["options"])
    characters = options.char_cnn.characters
    assert options.char_cnn.n_characters == characters.n_ids  # the training form: unshifted ids
    assert options.word_embedding.dim == M.ARCHITECTURE["token_embedder"]["word_dim"]
    vocab = vocabulary_for(options, efml["vocab"])
    width = options.char_cnn.max_characters_per_token + 1
    assert vocab.word_char_ids.shape == (vocab.size, width)
    bos = vocab.word_char_ids[vocab.bos]
    assert list(bos[:3]) == [characters.begin_of_word, characters.sentence_start, characters.end_of_word]
    words = options.word_embedding.dictionary
    the, zebra = vocab.word_char_ids[vocab.word_to_id("the")], vocab.word_char_ids[vocab.word_to_id("zebra")]
    assert the[-1] == words.ids["the"] and zebra[-1] == words.unknown
    assert zebra[1] == characters.unknown  # "z" is not in the model's characters
    assert the[1] == characters.ids["t"]


@pytest.mark.slow
def test_the_softmax_alone_first_leaves_the_models_weights_as_they_were(efml, tmp_path):
    _train(efml, tmp_path / "ckpt", softmax_init="random", overrides={"softmax_warmup_steps": 4}, max_steps=3)
    written = dump_weights(tmp_path / "ckpt", tmp_path / "adapted.hdf5")
    converted = locate_model(efml["folder"])
    with h5py.File(converted.weight_file, "r") as model, h5py.File(written["weight_file"], "r") as adapted:
        names = []
        model.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
        assert "word_embed" in names and "char_embed" in names
        for name in names:
            if name.startswith(("char_embed", "word_embed", "CNN", "RNN")):
                np.testing.assert_array_equal(adapted[name][()], model[name][()], err_msg=name)


@pytest.mark.slow
def test_an_adapted_run_learns_restarts_exactly_dumps_and_loads(efml, tmp_path):
    before = _train(efml, tmp_path / "stopped", softmax_init="fit", max_steps=1)
    start = heldout_perplexity(efml["heldout"], efml["vocab"], tmp_path / "stopped", verbose=0)
    first = checkpoint_arrays(before["checkpoint"])
    # Restart exactly: 1 step, then 19 more, as the 20 in one go.
    resumed = train_from_files(efml["train"], efml["vocab"], tmp_path / "stopped", restart=True, max_steps=19,
                               verbose=0)
    after = _train(efml, tmp_path / "straight", softmax_init="fit", max_steps=20)
    trained = heldout_perplexity(efml["heldout"], efml["vocab"], tmp_path / "straight", verbose=0)
    assert trained < 0.8 * start, (start, trained)
    assert after["step"] == resumed["step"] == 20 and before["step"] == 1
    arrays, got = checkpoint_arrays(after["checkpoint"]), checkpoint_arrays(resumed["checkpoint"])
    assert sorted(got) == sorted(arrays)
    for name in arrays:
        np.testing.assert_allclose(got[name], arrays[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # The token embedder trains: the word and character tables move.
    moved = [name for name in arrays if "word_embedding" in name or "char_cnn" in name]
    assert moved and any(not np.array_equal(arrays[name], first[name]) for name in moved)
    # The result opens as any bilm model and reads text through the dictionaries it keeps.
    written = dump_weights(tmp_path / "straight", tmp_path / "adapted.hdf5")
    saved = load_options(written["options_file"])
    assert saved.char_cnn.characters is not None and saved.word_embedding is not None
    vectors = bilm.load(written["weight_file"]).embed([["the", "zebra", "中文"]])[0]
    assert vectors.shape == (3, 2 * M.ARCHITECTURE["encoder"]["projection_dim"]) and np.isfinite(vectors).all()


def test_options_may_not_give_a_byte_model_a_dictionary_models_weights(efml, tmp_path):
    options_file = tmp_path / "contradicting.json"
    options_file.write_text(json.dumps({**TRAINING_KEYS, "word_embedding": None,
                                        "char_cnn": {"max_characters_per_token": 50}}))
    with pytest.raises(bilm.errors.UserError, match="char_cnn.max_characters_per_token"):
        train_from_files(efml["train"], efml["vocab"], tmp_path / "ckpt", str(options_file),
                         init_from=efml["folder"], verbose=0)
    assert not os.path.exists(tmp_path / "ckpt")
