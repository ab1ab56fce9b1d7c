"""Keras models with ELMo under XLA: `compile(jit_compile=True)`, and "auto" on a machine where Keras sees a GPU.

Keras's "auto" turns XLA on for the TensorFlow backend wherever a non-CPU
device is visible and every layer `supports_jit`; here a GPU is made
visible to that decision alone (the work still runs on this CPU), so the
compiled programs are the ones a GPU machine would compile. Each compiled
model must give what the uncompiled one gives: ids compile, text makes Keras
fall back to no XLA (never a crash).
"""
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bilm import Batcher, ELMoEmbedding
from bilm.models import write_random_model
from bilm.presets import get_preset
from helpers import ROOT

SENTENCES = [["The", "cat", "sat", "down"], ["Hi"], ["a", "b", "a"]]
TAGS = np.array([[0, 1, 2, 1], [1, 0, 0, 0], [2, 2, 1, 0]])


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_random_model(str(tmp_path_factory.mktemp("tiny")), get_preset("tiny"), seed=0)


@pytest.fixture
def gpu_visible_to_keras(monkeypatch):
    """Keras's "auto" decision sees a GPU (`tf.config.list_physical_devices`); nothing else does."""
    listed = [*tf.config.list_physical_devices(), tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda device_type=None: [
        d for d in listed if device_type is None or d.device_type == device_type])


def _readme_tagger(model_files, jit_compile):
    """The README's tagger (ELMo, a BiLSTM, softmax tags) on char ids, with the same weights on every call."""
    keras.utils.set_random_seed(3)
    x, tokens = Batcher(None, 50).batch_sentences(SENTENCES), keras.Input(shape=(None, 50), dtype="int32")
    elmo = ELMoEmbedding.from_files(*model_files, start="zeros")(tokens)
    hidden = keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True))(elmo)
    tagger = keras.Model(tokens, keras.layers.Dense(3, activation="softmax")(hidden))
    tagger.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", jit_compile=jit_compile)
    return tagger, x


def _fit_evaluate_predict(tagger, x):
    y = tf.constant(TAGS[:, :x.shape[1] - 2])  # the ids' time holds the two boundaries
    tagger.fit(x, y, epochs=2, batch_size=len(SENTENCES), shuffle=False, verbose=0)
    return tagger.evaluate(x, y, verbose=0), tagger.predict(x, verbose=0), [w.numpy() for w in tagger.weights]


def _assert_same_run(compiled, plain):
    assert compiled[0] == pytest.approx(plain[0], abs=1e-5)
    np.testing.assert_allclose(compiled[1], plain[1], atol=1e-5)
    for a, b in zip(compiled[2], plain[2]):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.slow
def test_readme_tagger_under_xla_equals_the_uncompiled_tagger(tiny_model, gpu_visible_to_keras, tmp_path):
    """Ids compile under Keras's default "auto", since a GPU is visible (True is the same program, compiled again,
    so left out). Text makes Keras compile without XLA, its own fallback: `test_usage_downstream_tagger_under_xla`
    runs the README's tagger on text under "auto", True and False."""
    tagger, x = _readme_tagger(tiny_model, False)
    plain = _fit_evaluate_predict(tagger, x)
    tagger, x = _readme_tagger(tiny_model, "auto")
    assert tagger.jit_compile is True
    compiled = _fit_evaluate_predict(tagger, x)
    _assert_same_run(compiled, plain)
    # Saved and loaded, it still compiles as before and predicts the same.
    path = str(tmp_path / "tagger.keras")
    tagger.save(path)
    loaded = keras.models.load_model(path)
    loaded.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", jit_compile="auto")
    assert loaded.jit_compile is True
    np.testing.assert_allclose(loaded.predict(x, verbose=0), compiled[1], atol=1e-5)


@pytest.mark.slow
def test_every_output_compiles_and_equals_the_uncompiled_layer(tiny_model):
    layer = ELMoEmbedding.from_files(*tiny_model, output="all", start="zeros")
    ids = Batcher(None, 50).batch_sentences(SENTENCES)
    plain = layer(ids)
    compiled = tf.function(lambda ids: layer(ids), jit_compile=True)(ids)
    for key in plain:
        np.testing.assert_allclose(compiled[key], plain[key], atol=1e-5, err_msg=key)


def test_text_under_an_explicit_xla_function_is_one_clear_error(tiny_model):
    layer = ELMoEmbedding.from_files(*tiny_model, start="zeros")
    strings = tf.ragged.constant(SENTENCES).to_tensor(default_value="")
    with pytest.raises(Exception, match="text inputs cannot be compiled with XLA"):
        tf.function(lambda x: layer(x), jit_compile=True)(strings)
    assert layer.supports_jit is False


def test_a_text_layer_tells_keras_it_does_not_compile(tiny_model):
    text = ELMoEmbedding.from_files(*tiny_model, input_type="tokens")
    assert text.supports_jit is False
    assert ELMoEmbedding.from_files(*tiny_model, input_type="char_ids").supports_jit is True
    # As a saved model's layer is rebuilt from its config (a .keras file), so Keras decides again as before.
    assert ELMoEmbedding.from_config(text.get_config()).supports_jit is False


@pytest.mark.slow
def test_usage_downstream_tagger_under_xla(tiny_model, gpu_visible_to_keras):
    sys.path.insert(0, os.path.join(ROOT, "usage"))
    try:
        import usage_downstream
    finally:
        sys.path.remove(os.path.join(ROOT, "usage"))
    tokens = tf.ragged.constant(SENTENCES).to_tensor(default_value="")
    runs = []
    for jit_compile in ("auto", True, False):
        keras.utils.set_random_seed(1)
        model, _ = usage_downstream.build_tagger(*tiny_model, "elmo", jit_compile=jit_compile)
        assert model.jit_compile is False  # text in: Keras's own fallback, the same model whatever was asked
        if jit_compile is not True:  # True falls back as "auto" does (above): trained once, with "auto"
            model.fit(tokens, tf.constant(TAGS), epochs=2, verbose=0)
            runs.append(model.predict(tokens, verbose=0))
    np.testing.assert_allclose(runs[0], runs[1], atol=1e-5)


# The mixes of WeightLayers whose ops differ: "frozen", "average" and "top" compute parts of the scalar mix's sum
# (its weights not trained, equal, or one layer's).
@pytest.mark.parametrize("mix", ["scalar", "dense", "attention"])
@pytest.mark.slow
def test_bench_classifier_under_xla_equals_the_uncompiled_classifier(mix, gpu_visible_to_keras):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import downstream_classifier as classifier
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    rng = np.random.default_rng(0)
    inputs = {"mask": np.arange(6)[None, :] < np.array([[6], [3], [1], [4]]),
              "layers": rng.normal(size=(4, 3, 6, 8)).astype(np.float32),
              "words": rng.integers(0, 10, size=(4, 6)).astype(np.int32)}
    labels = np.array([0, 1, 1, 0])
    variant = classifier.Variant(mix=mix, words=True, elmo_dropout=0.1, layer_norm=mix == "scalar")
    compiled, _ = classifier.build_classifier(variant, 10, 3, 8, seed=5, jit_compile="auto")
    plain, _ = classifier.build_classifier(variant, 10, 3, 8, seed=5, jit_compile=False)
    assert compiled.jit_compile is True and plain.jit_compile is False
    before = compiled.evaluate(inputs, labels, verbose=0)[0]
    compiled.fit(inputs, labels, epochs=3, batch_size=4, shuffle=False, verbose=0)
    # Dropout draws its masks by another algorithm under XLA, so training is
    # compared through its result: the compiled run's weights, run both ways.
    plain.set_weights(compiled.get_weights())
    after = compiled.evaluate(inputs, labels, verbose=0)
    assert after[0] < before
    assert after == pytest.approx(plain.evaluate(inputs, labels, verbose=0), abs=1e-5)
    np.testing.assert_allclose(compiled.predict(inputs, verbose=0), plain.predict(inputs, verbose=0), atol=1e-5)


@pytest.mark.slow
def test_text_turned_into_ids_in_the_input_pipeline_compiles(tiny_model):
    # Keras's convention: preprocessing in tf.data, the network compiled.
    layer = ELMoEmbedding.from_files(*tiny_model, input_type="char_ids", start="zeros")
    ids = keras.Input(shape=(None, 50), dtype="int32")
    tagger = keras.Model(ids, keras.layers.Dense(3, activation="softmax")(layer(ids)))
    tagger.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", jit_compile=True)
    assert tagger.jit_compile is True
    strings = tf.ragged.constant(SENTENCES).to_tensor(default_value="")
    data = tf.data.Dataset.from_tensor_slices((strings, TAGS)).batch(3).map(
        lambda x, y: (layer.to_ids(x, input_type="tokens"), y))
    tagger.fit(data, epochs=1, verbose=0)
    compiled = tagger.predict(data.map(lambda x, y: x), verbose=0)
    np.testing.assert_allclose(compiled, tagger(Batcher(None, 50).batch_sentences(SENTENCES)), atol=1e-5)
