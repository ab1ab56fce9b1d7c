"""build_bilm: a dict-in, dict-out Keras model of the biLM, against the NumPy oracle; its layouts, inputs and
outputs; the token encoder and the contextual model built on its layers."""
import keras
import numpy as np
import pytest

import numpy_reference as R
from bilm.io.formats.weight_file import load_bilm_weights
from bilm.models.functional_bilm import build_bilm, build_contextual_bilm, state_keys
from bilm.models.token_encoding import build_token_encoder
from bilm.options import load_options
from bilm.text.batching import Batcher
from helpers import SENTENCES

MAX_CHARS = 7  # helpers.write_model's options


@pytest.fixture(scope="module")
def loaded(model):
    """`(options, weights, {deduplicate_tokens: built model with model's weights})`."""
    options_file, weight_file, _ = model
    options = load_options(options_file)
    networks = {}
    for deduplicate in (True, False):
        networks[deduplicate] = build_bilm(options, deduplicate_tokens=deduplicate)
        load_bilm_weights(networks[deduplicate], weight_file)
    return options, R.read_weights(weight_file), networks


def _random_states(options, batch, seed=0):
    rng = np.random.default_rng(seed)
    return {key: rng.normal(size=(batch, size), scale=0.5).astype(np.float32)
            for key, _, size in state_keys(options)}


def _oracle_states(options, states):
    return {(d, l): (states[f"{direction}_{l}_c"], states[f"{direction}_{l}_h"])
            for d, direction in enumerate(("forward", "backward")) for l in range(options.n_layers)}


@pytest.mark.parametrize("deduplicate", [True, False])
def test_outputs_equal_the_numpy_oracle_from_any_initial_state(model, loaded, deduplicate):
    options, weights, networks = loaded
    ids = Batcher(None, MAX_CHARS).batch_sentences(SENTENCES)
    states = _random_states(options, len(SENTENCES))
    out = networks[deduplicate]({"token_characters": ids, **states})
    want = R.bilm_forward(weights, model[2], ids, _oracle_states(options, states))
    p = options.projection_dim
    np.testing.assert_array_equal(out["lengths"].numpy(), want["lengths"] + 2)
    np.testing.assert_array_equal(out["mask"].numpy(), np.arange(ids.shape[1]) < (want["lengths"] + 2)[:, None])
    np.testing.assert_allclose(out["token_embeddings"].numpy(), want["token_embeddings"], atol=1e-5)
    for l in range(options.n_layers):
        np.testing.assert_allclose(out[f"forward_{l}"].numpy(), want["layers"][l + 1][..., :p], atol=1e-5)
        np.testing.assert_allclose(out[f"backward_{l}"].numpy(), want["layers"][l + 1][..., p:], atol=1e-5)
    for (d, l), (c, h) in want["final_states"].items():
        direction = ("forward", "backward")[d]
        np.testing.assert_allclose(out[f"final_{direction}_{l}_c"].numpy(), c, atol=1e-5)
        np.testing.assert_allclose(out[f"final_{direction}_{l}_h"].numpy(), h, atol=1e-5)


def test_state_keys_name_every_state_with_its_size(loaded):
    options = loaded[0]
    keys = state_keys(options)
    assert [key for key, _, _ in keys] == [f"{d}_{l}_{part}" for d in ("forward", "backward")
                                           for l in range(options.n_layers) for part in "ch"]
    assert all(out == f"final_{key}" for key, out, _ in keys)
    assert {size for key, _, size in keys if key.endswith("_c")} == {options.lstm_dim}
    assert {size for key, _, size in keys if key.endswith("_h")} == {options.projection_dim}
    assert [key for key, _, _ in state_keys(options, bidirectional=False)] == [key for key, _, _ in keys[:4]]


def _input_names(network):
    return sorted(tensor.name for tensor in keras.tree.flatten(network.input))


@pytest.mark.parametrize("kwargs, extra_inputs", [
    ({}, ["token_characters"]),
    ({"layout": "training"}, ["token_characters", "token_characters_reverse"]),
    ({"layout": "training", "bidirectional": False}, ["token_characters"]),
    ({"layout": "training", "dropout": 0.1}, ["dropout_seed", "token_characters", "token_characters_reverse"]),
])
def test_each_layout_takes_its_inputs_and_gives_every_output(loaded, kwargs, extra_inputs):
    options = loaded[0]
    network = build_bilm(options, **kwargs)
    bidirectional = kwargs.get("bidirectional", True)
    keys = state_keys(options, bidirectional)
    assert _input_names(network) == sorted(extra_inputs + [key for key, _, _ in keys])
    directions = ("forward", "backward")[:1 + bidirectional]
    assert sorted(network.output) == sorted(
        ["token_embeddings", "mask", "lengths"] + [f"{d}_{l}" for d in directions for l in range(options.n_layers)]
        + [out for _, out, _ in keys])
    names = {layer.name for layer in network.layers}
    assert {"char_cnn", "highway", "sequence_mask", "forward_lstm_0", "forward_lstm_1"} <= names
    assert ("backward_lstm_0" in names) == bidirectional
    # The encoder's 12 filters are projected to projection_dim 6.
    assert "token_projection" in names


def test_token_inputs_need_the_vocabulary_size_and_a_bad_layout_is_refused(loaded):
    token_options = load_options(R.make_options(char_cnn=False))
    with pytest.raises(ValueError, match="Token inputs .* need n_token_vocab"):
        build_bilm(token_options)
    network = build_bilm(token_options, n_token_vocab=11)
    assert "token_ids" in _input_names(network)
    assert network.get_layer("token_embedding").embeddings.shape == (11, 6)
    with pytest.raises(ValueError, match=r"layout must be one of \('prediction', 'training'\). Received: layout='x'"):
        build_bilm(loaded[0], layout="x")


@pytest.mark.parametrize("char", [True, False], ids=["characters", "tokens"])
def test_a_biLM_whose_weights_follow_draws_nothing_at_random(loaded, char):
    """Built for a file to set its weights (`WEIGHTS_FOLLOW`, `kernel_initializer="zeros"`), every table and
    kernel starts at zeros: each weight holds one value (a bias its constant). Drawing them was wasted work, on
    JAX a compiled program for each new shape."""
    from bilm.models.functional_bilm import WEIGHTS_FOLLOW

    options = loaded[0] if char else load_options(R.make_options(char_cnn=False))
    with WEIGHTS_FOLLOW.on():
        network = build_bilm(options, n_token_vocab=None if char else 11, layout="training")
    drawn = [w.path for w in network.weights if np.unique(keras.ops.convert_to_numpy(w)).size > 1]
    assert not drawn
    # Outside the flag the original's random start.
    network = build_bilm(options, n_token_vocab=None if char else 11)
    tables = [w for w in network.weights if "embedding" in w.path or "kernel" in w.path]
    assert tables and all(np.unique(keras.ops.convert_to_numpy(w)).size > 1 for w in tables)


def test_the_token_encoder_and_the_contextual_model_share_the_biLMs_layers(loaded):
    """The cached path: distinct tokens encoded once, then the LSTM stacks over an index of them."""
    options, _, networks = loaded
    network = networks[False]
    ids = Batcher(None, MAX_CHARS).batch_sentences(SENTENCES)
    states = _random_states(options, len(SENTENCES), seed=1)
    full = network({"token_characters": ids, **states})
    rows, index = np.unique(ids.reshape(-1, MAX_CHARS), axis=0, return_inverse=True)
    encoder = build_token_encoder(network, options)
    encodings = encoder(rows[np.newaxis]).numpy()
    contextual = build_contextual_bilm(network, options)({
        "distinct_encodings": encodings, "token_index": index.reshape(ids.shape[:2]).astype(np.int32),
        "mask": full["mask"].numpy(), **states})
    assert sorted(contextual) == sorted(full)
    for key, value in full.items():
        np.testing.assert_allclose(contextual[key].numpy(), value.numpy(), atol=1e-5, err_msg=key)
