"""An ELMoForManyLangs model works everywhere a bilm-tf model does: embed and sentence vectors, embedding files,
`bin/elmo.py`, `ELMoEmbedding` with text (and a `.keras` file), the SavedModel, bfloat16 kernels, the boundary
state, token embeddings."""
import os
import sys

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import bilm
import efml_models as M
import warm_python
from bilm.export.token_embeddings import dump_token_embeddings
from bilm.io.sources.model_files import locate_model
from bilm.ops.matmul_dtype import BFLOAT16_INFERENCE_TOLERANCE
from helpers import ROOT, write_lines

SENTENCES = M.SENTENCES
TOKENS = tf.ragged.constant([s for s in SENTENCES if s]).to_tensor(default_value="")


@pytest.fixture(scope="module")
def efml(tmp_path_factory):
    """`(model folder, converted ModelFiles, the zero-start ELMo, its layers of SENTENCES)`."""
    tmp = tmp_path_factory.mktemp("efml")
    M.write_model(tmp / "xx.model", "zip", seed=2)
    files = locate_model(tmp / "xx.model", cache_dir=tmp / "cache")
    elmo = bilm.load(str(tmp / "xx.model"), cache_dir=tmp / "cache", start="zeros")
    return tmp / "xx.model", files, elmo, elmo.embed(SENTENCES, layers="all")


def test_sentence_vectors_and_an_embedding_file(efml, tmp_path):
    _, _, elmo, layers = efml
    vectors = elmo.sentence_vectors(SENTENCES)
    for row, sentence_layers in zip(vectors, layers):
        want = sentence_layers.mean(axis=(0, 1)) if sentence_layers.shape[1] else np.zeros(12)
        np.testing.assert_allclose(row, want, atol=1e-6)
    text = write_lines(tmp_path, [" ".join(s) for s in SENTENCES], "in.txt")
    elmo.embed_file(text, tmp_path / "out.hdf5")
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        for i, (sentence, sentence_layers) in enumerate(zip(SENTENCES, layers)):
            if " ".join(sentence).split() == sentence:  # the ideographic space splits a line
                np.testing.assert_allclose(f[str(i)][...], sentence_layers, atol=1e-6)


@pytest.mark.slow
def test_bin_elmo_with_the_model_folder(efml, tmp_path):
    folder, _, _, layers = efml
    text = write_lines(tmp_path, ["the cat sat", "a dog Zebra 中文 ü"], "in.txt")
    env = {**os.environ, "PYTHONPATH": ROOT, "BILM_CACHE": str(folder.parent / "cache")}
    result = warm_python.run([sys.executable, "bin/elmo.py", text, str(tmp_path / "out.hdf5"), "--model", str(folder),
                             "--start", "zeros"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        np.testing.assert_allclose(f["0"][...], layers[0], atol=1e-6)
        np.testing.assert_allclose(f["1"][...], layers[1], atol=1e-6)


def test_a_keras_layer_on_text_and_its_keras_file(efml, tmp_path):
    _, _, elmo, layers = efml
    layer = elmo.keras_layer(output="all")
    out = layer(TOKENS)
    filled = [s for s in layers if s.shape[1]]
    for row, sentence_layers in enumerate(filled):
        n = sentence_layers.shape[1]
        np.testing.assert_allclose(out["word_emb"][row, :n], sentence_layers[0, :, :6], atol=1e-5)
        np.testing.assert_allclose(out["lstm_outputs2"][row, :n], sentence_layers[2], atol=1e-5)
    sentences = layer(tf.constant([" ".join(s) for s in SENTENCES[:2]]))["lstm_outputs1"]
    np.testing.assert_allclose(sentences[1, :5], layers[1][1], atol=1e-5)

    tokens = keras.Input(shape=(None,), dtype="string")
    model = keras.Model(tokens, keras.layers.Dense(2)(elmo.keras_layer(output="elmo")(tokens)))
    expected = model(TOKENS).numpy()
    model.save(tmp_path / "tagger.keras")
    np.testing.assert_array_equal(keras.models.load_model(tmp_path / "tagger.keras")(TOKENS).numpy(), expected)


@pytest.mark.slow
def test_the_saved_model_takes_text(efml, tmp_path):
    _, files, elmo, layers = efml
    export = bilm.export_saved_model(files.options_file, files.weight_file, str(tmp_path / "sm"), start="zeros")
    reloaded = tf.saved_model.load(export)
    out = reloaded.tokens(TOKENS, tf.constant([len(s) for s in SENTENCES if s], tf.int32))
    for row, sentence_layers in enumerate(s for s in layers if s.shape[1]):
        np.testing.assert_allclose(out["lstm_outputs1"][row, :sentence_layers.shape[1]], sentence_layers[1],
                                   atol=1e-5)


def test_bfloat16_kernels_stay_within_their_tolerance(efml):
    folder, _, _, layers = efml
    elmo = bilm.load(str(folder), cache_dir=folder.parent / "cache", start="zeros", kernel_dtype="bfloat16")
    for got, want in zip(elmo.embed(SENTENCES, layers="all"), layers):
        if want.size:
            deviations = np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)
            assert 1e-5 < deviations.max() < BFLOAT16_INFERENCE_TOLERANCE


@pytest.mark.slow
def test_the_boundary_state_makes_each_sentence_its_own(efml):
    folder, _, _, zero_layers = efml
    text = [s for s in SENTENCES if s] * 8
    elmo = bilm.load(str(folder), cache_dir=folder.parent / "cache", warm_up=text)
    assert elmo.start == "warm" and set(elmo.boundary_state) == {f"{d}_{layer}_{part}" for d in ("forward", "backward")
                                                                  for layer in range(2) for part in "ch"}
    together = elmo.embed(SENTENCES, layers="all")
    for sentence, vectors in zip(SENTENCES, together):
        np.testing.assert_allclose(elmo.embed([sentence], layers="all")[0], vectors, atol=1e-5)
    assert not np.allclose(together[0], zero_layers[0], atol=1e-3)
    np.testing.assert_allclose(elmo.embed(SENTENCES[:1], layers="all", start="zeros")[0], zero_layers[0], atol=1e-5)


def test_token_embeddings_are_the_context_free_layer(efml, tmp_path):
    _, files, _, layers = efml
    vocab = write_lines(tmp_path, ["<S>", "</S>", "the", "cat", "sat"], "vocab.txt")
    dump_token_embeddings(vocab, files.options_file, files.weight_file, tmp_path / "tokens.hdf5")
    with h5py.File(tmp_path / "tokens.hdf5", "r") as f:
        np.testing.assert_allclose(f["embedding"][2:], layers[0][0, :, :6], atol=1e-6)
