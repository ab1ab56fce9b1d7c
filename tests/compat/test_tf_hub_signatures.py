"""TF-Hub's ELMo module on bilm: `hub.load(...).signatures`, TF1's `hub.Module(...)(..., signature=, as_dict=)` and
`hub.KerasLayer`, with only the import changed, give the module's outputs: bilm's own layers of each sentence,
mixed by the module's learned weights, zero past each length, `default` their mean."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from bilm.compat import tf_hub as hub
from bilm.errors import UserError
from bilm.pretrained import ELMo
from helpers import write_model
from hub_modules import MIX_GAMMA, MIX_W, write_module

SENTENCES = ["the cat is on the mat", "dogs are in the fog"]


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    """A TF1 Hub module's folder (with TF-Hub's learned mix) and bilm's `ELMo` of its weights."""
    folder = tmp_path_factory.mktemp("hub")
    options_file, weight_file, _ = write_model(folder, seed=2, max_chars=50)
    return write_module(str(folder / "elmo_module"), weight_file), ELMo(options_file, weight_file, start="zeros")


def expected_outputs(elmo, lengths, time=None):
    """TF-Hub's outputs of the first `lengths` tokens of each of `SENTENCES` (bilm's layers of those tokens,
    mixed by the module's weights), padded to `time` (None: the longest)."""
    weights = np.exp(MIX_W) / np.exp(MIX_W).sum()
    time = time or max(lengths)
    outputs = {key: [] for key in ("word_emb", "lstm_outputs1", "lstm_outputs2", "elmo", "default")}
    layers = elmo.embed([s.split()[:length] for s, length in zip(SENTENCES, lengths)], layers="all")
    for sentence, length in zip(layers, lengths):
        elmo = MIX_GAMMA * np.einsum("l,ltd->td", weights, sentence)
        pad = [(0, time - length), (0, 0)]
        outputs["word_emb"].append(np.pad(sentence[0, :, :sentence.shape[-1] // 2], pad))
        outputs["lstm_outputs1"].append(np.pad(sentence[1], pad))
        outputs["lstm_outputs2"].append(np.pad(sentence[2], pad))
        outputs["elmo"].append(np.pad(elmo, pad))
        outputs["default"].append(elmo.mean(axis=0))
    return {key: np.stack(value) for key, value in outputs.items()}


def check(outputs, expected, lengths):
    # The module runs the layers as an `ELMoEmbedding` (a Keras model), `ELMo.embed` otherwise: float32 round-off
    # apart (1.4e-6 on an AVX2 CPU without AVX-512), as the other tests of `ELMoEmbedding` allow.
    for key, value in expected.items():
        np.testing.assert_allclose(outputs[key].numpy(), value, rtol=1e-5, atol=1e-5, err_msg=key)
    np.testing.assert_array_equal(outputs["sequence_len"].numpy(), lengths)


@pytest.mark.slow  # over 3 s on two busy cores
def test_the_loaded_modules_signatures_give_its_outputs(module):
    path, bilm_elmo = module
    elmo = hub.load(path)
    outputs = elmo.signatures["default"](tf.constant(SENTENCES))
    check(outputs, expected_outputs(bilm_elmo, [6, 5]), [6, 5])
    # Tokens past a row's sequence_len are ignored; arguments by name.
    tokens = tf.constant([["the", "cat", "is", "on", "the", "mat"], ["dogs", "are", "in", "the", "fog", "IGNORED"]])
    outputs = elmo.signatures["tokens"](tokens=tokens, sequence_len=tf.constant([6, 5]))
    check(outputs, expected_outputs(bilm_elmo, [6, 5]), [6, 5])
    outputs = elmo.signatures["tokens"](tokens, tf.constant([2, 3]))
    check(outputs, expected_outputs(bilm_elmo, [2, 3], time=6), [2, 3])


def test_tf1_modules_call_and_keras_layer(module):
    path, bilm_elmo = module
    elmo = hub.Module(path, trainable=True)
    assert len(elmo.trainable_variables) == 2  # the mix's weights and scale (TF-Hub's 4 scalars)
    default = elmo(SENTENCES, signature="default")
    np.testing.assert_allclose(default.numpy(), expected_outputs(bilm_elmo, [6, 5])["default"], atol=1e-6)
    as_dict = elmo(inputs={"tokens": [["the", "cat"], ["dogs", ""]], "sequence_len": [2, 1]}, signature="tokens",
                   as_dict=True)
    check(as_dict, expected_outputs(bilm_elmo, [2, 1]), [2, 1])
    assert hub.Module(path).trainable_variables == []
    with pytest.raises(UserError, match="signature must be one of"):
        elmo(SENTENCES, signature="elmo")
    with pytest.raises(UserError, match="output_key"):
        hub.KerasLayer(path)


@pytest.mark.slow
def test_a_keras_model_on_the_keras_layer_trains_the_mix_only(module):
    path, _ = module
    layer = hub.KerasLayer(path, signature="default", output_key="default", trainable=True)
    text = keras.Input(shape=(), dtype="string")
    model = keras.Model(text, keras.layers.Dense(2)(layer(text)))
    model.compile(keras.optimizers.Adam(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = {v.path: v.numpy().copy() for v in layer.weights}
    model.fit(tf.constant(SENTENCES * 2), np.array([0, 1, 0, 1]), epochs=2, verbose=0)
    changed = [v.path for v in layer.weights if not np.array_equal(v.numpy(), before[v.path])]
    assert sorted(path.split("/", 1)[1] for path in changed) == ["elmo_mix/W", "elmo_mix/gamma"], changed
