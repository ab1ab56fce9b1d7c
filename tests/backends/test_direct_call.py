"""bilm.backend.direct_call: a bilm network called layer by layer gives the bytes of Keras's call and of its
`stateless_call` (inference, and training with dropout), without entering any layer's `Layer.__call__`;
networks the direct path cannot serve as Keras does (another dtype policy, a nested network, a missing input)
go through Keras's own call. On PyTorch, the inference call of `bilm.load` takes the direct path."""
import keras
import numpy as np
import pytest

from backend_processes import json_result, run_on_backend
from bilm.backend.direct_call import direct_call, direct_path, stateless_direct_call
from bilm.models.functional_bilm import build_bilm, state_keys
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from training_helpers import tiny_options


def _inputs(options, network, rng, batch=3, time=5):
    inputs = {key: rng.normal(size=(batch, size), scale=0.5).astype(np.float32)
              for key, _, size in state_keys(options, bidirectional=True)}
    char_ids = rng.integers(1, 261, size=(batch, time, options.char_cnn.max_characters_per_token)).astype(np.int32)
    char_ids[0, 3:] = 0  # a shorter sentence
    names = {tensor.name for tensor in network.inputs}
    for name in names - set(inputs):
        if name.startswith("token_characters"):
            inputs[name] = char_ids
        elif name == "dropout_seed":
            inputs[name] = np.array([7, 11], np.int64)
    return inputs


def _layer_calls(monkeypatch):
    """The layers whose `Layer.__call__` runs, by name, from now on."""
    called = []
    original = keras.layers.Layer.__call__

    def counting(self, *args, **kwargs):
        called.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(keras.layers.Layer, "__call__", counting)
    return called


def _same_bytes(got, want):
    assert sorted(got) == sorted(want)
    for key in want:
        assert keras.ops.convert_to_numpy(got[key]).tobytes() == keras.ops.convert_to_numpy(want[key]).tobytes(), key


@pytest.mark.parametrize("layout, dropout, training", [("prediction", 0.0, False), ("training", 0.1, True),
                                                       ("training", 0.1, False)])
def test_a_bilm_network_layer_by_layer_gives_the_bytes_of_keras_call_and_stateless_call(
        model, monkeypatch, layout, dropout, training):
    if layout == "training":
        options, _ = training_settings(tiny_options(dropout=dropout))
    else:
        options = load_options(model[0])
    network = build_bilm(options, layout=layout, dropout=dropout)
    inputs = _inputs(options, network, np.random.default_rng(0))
    assert direct_path(network)
    want = network(inputs, training=training)
    trainable = [v.value * 1.5 for v in network.trainable_variables]
    non_trainable = [v.value for v in network.non_trainable_variables]
    want_stateless = network.stateless_call(trainable, non_trainable, inputs, training=training)[0]

    called = _layer_calls(monkeypatch)
    got = direct_call(network, inputs, training=training)
    got_stateless = stateless_direct_call(network, trainable, non_trainable, inputs, training=training)
    assert called == []
    _same_bytes(got, want)
    _same_bytes(got_stateless, want_stateless)
    assert not np.array_equal(keras.ops.convert_to_numpy(got_stateless["forward_0"]),
                              keras.ops.convert_to_numpy(got["forward_0"]))  # the given weights were used


def test_what_the_direct_path_cannot_serve_goes_through_keras(monkeypatch):
    inputs = {"x": keras.Input((4,), name="x")}
    plain = keras.Model(inputs, {"y": keras.layers.Dense(3, name="dense")(inputs["x"])})
    mixed = keras.Model(inputs, {"y": keras.layers.Dense(3, dtype="mixed_float16", name="half")(inputs["x"])})
    nested = keras.Model(inputs, {"y": keras.Sequential([keras.layers.Dense(3)], name="inner")(inputs["x"])})
    assert direct_path(plain) and not direct_path(mixed) and not direct_path(nested)
    x = {"x": np.ones((2, 4), np.float32)}
    called = _layer_calls(monkeypatch)
    _same_bytes(direct_call(plain, x), plain(x))
    assert called == [plain.name, "dense"]  # only Keras's call of the reference
    direct_call(mixed, x)
    assert "half" in called
    with pytest.raises((ValueError, KeyError)):
        direct_call(plain, {"z": x["x"]})  # a missing input: Keras's own error
    with pytest.raises(ValueError, match="trainable_variables"):
        stateless_direct_call(plain, [], [], x)  # too few weights: Keras's own error, not outputs of fewer
    plain.get_layer("dense").dtype_policy = "mixed_float16"  # changed after calls that ran layer by layer
    assert not direct_path(plain)


@pytest.mark.slow  # PyTorch in a process of its own
def test_on_pytorch_the_inference_call_runs_layer_by_layer(model):
    report = json_result(run_on_backend("torch", f'''
import json
import keras
import numpy as np
import bilm
from bilm.backend.direct_call import direct_path

lm = bilm.BidirectionalLanguageModel({str(model[0])!r}, {str(model[1])!r}, stateful=False, start="zeros")
ids = bilm.Batcher(None, lm.options.char_cnn.max_characters_per_token).batch_sentences([["a", "bc"], ["d"]])
called = []
original = keras.layers.Layer.__call__
def counting(self, *args, **kwargs):
    called.append(self.name)
    return original(self, *args, **kwargs)
keras.layers.Layer.__call__ = counting
got = keras.ops.convert_to_numpy(lm(ids)["lm_embeddings"])
print(json.dumps({{"direct": direct_path(lm.network), "called": called, "shape": list(got.shape)}}))
'''))
    assert report["direct"] and report["called"] == [] and report["shape"][0] == 2


def test_the_elmo_layer_calls_its_network_layer_by_layer_and_builds_in_a_functional_model(model, monkeypatch):
    from bilm.models.elmo_embedding import ELMoEmbedding
    from bilm.text.batching import Batcher

    layer = ELMoEmbedding.from_files(str(model[0]), str(model[1]), output="elmo")
    ids = Batcher(None, 7).batch_sentences([["a", "bc"], ["d"]])
    want = keras.ops.convert_to_numpy(layer(ids))
    inputs = keras.Input((None, 7), dtype="int32")
    tagger = keras.Model(inputs, keras.layers.Dense(2)(layer(inputs)))  # a symbolic call: Keras's own
    called = _layer_calls(monkeypatch)
    got = keras.ops.convert_to_numpy(layer(ids))
    assert got.tobytes() == want.tobytes()
    assert not {sublayer.name for sublayer in layer.network.layers} & set(called), called
    assert tagger(ids).shape == (2, 2, 2)
