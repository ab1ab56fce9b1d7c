"""CharCNNEncoder: char embedding, valid convolutions, max-pool, then bias and activation, against NumPy."""
import numpy as np
import pytest

from backend_processes import json_result, run_on_backend
from bilm.layers.char_cnn import CharCNNEncoder
from layer_testing import run_layer_test

FILTERS = [(1, 2), (2, 3), (3, 4)]
KWARGS = {"n_characters": 11, "embedding_dim": 3, "filters": FILTERS}
# (batch 2, time 3, max_chars 5) ids; the last token is all padding (id 0).
CHAR_IDS = np.random.default_rng(0).integers(1, 11, size=(2, 3, 5)).astype(np.int32)
CHAR_IDS[1, 2] = 0


def _reference(char_ids, weights, activation):
    """Each filter: a valid convolution over the char positions, max over them, + bias, activation."""
    embedding, params = weights[0].astype(np.float64), weights[1:]
    embedded = embedding[char_ids]  # (batch, time, chars, dim)
    features = []
    for kernel, bias in zip(params[0::2], params[1::2]):
        width = kernel.shape[0]
        windows = [np.einsum("btkd,kdf->btf", embedded[:, :, t:t + width], kernel)
                   for t in range(char_ids.shape[-1] - width + 1)]
        features.append(np.max(windows, axis=0) + bias)
    features = np.concatenate(features, axis=-1)
    return np.maximum(features, 0.0) if activation == "relu" else np.tanh(features)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_layer_contract(activation):
    # Weights: the char embedding, then a kernel and a bias per filter.
    run_layer_test(CharCNNEncoder, {**KWARGS, "activation": activation}, CHAR_IDS,
                   expected_output_shape=(2, 3, 9), expected_num_trainable_weights=7,
                   expected_output_dtype="float32")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_outputs_equal_the_numpy_encoder(activation):
    layer = CharCNNEncoder(**KWARGS, activation=activation)
    layer.build(CHAR_IDS.shape)
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in layer.get_weights()]
    layer.set_weights(weights)
    out = layer(CHAR_IDS).numpy()
    np.testing.assert_allclose(out, _reference(CHAR_IDS, weights, activation), rtol=1e-5, atol=1e-5)
    # Inference on these few tokens runs the direct convolutions: the same encoder.
    np.testing.assert_allclose(layer(CHAR_IDS, training=False).numpy(), _reference(CHAR_IDS, weights, activation),
                               rtol=1e-5, atol=1e-5)
    assert layer.n_filters == 9 and (out > 0).any() and (activation == "relu") == (out >= 0).all()


def test_weights_are_named_and_shaped_as_the_filters_say():
    layer = CharCNNEncoder(**KWARGS)
    layer.build(CHAR_IDS.shape)
    assert [(w.name, tuple(w.shape)) for w in layer.weights] == [
        ("char_embedding", (11, 3)), ("kernel_0", (1, 3, 2)), ("bias_0", (2,)), ("kernel_1", (2, 3, 3)),
        ("bias_1", (3,)), ("kernel_2", (3, 3, 4)), ("bias_2", (4,))]
    np.testing.assert_array_equal(layer.biases[0].numpy(), 0.0)
    assert np.abs(layer.char_embedding.numpy()).max() <= 1.0


def test_filters_come_back_from_the_config_as_given():
    config = CharCNNEncoder(**KWARGS).get_config()
    assert config["filters"] == [[1, 2], [2, 3], [3, 4]]
    assert CharCNNEncoder.from_config(config).filters == FILTERS


def test_an_unknown_activation_is_a_clear_error():
    with pytest.raises(ValueError, match=r"activation must be 'relu' or 'tanh'. Received: activation='sigmoid'"):
        CharCNNEncoder(**KWARGS, activation="sigmoid")


ON_JAX = """
import json, sys
import jax, jax.numpy as jnp
import numpy as np
from bilm.backend.jax.layer_calls import distinct_tokens_at_most, distinct_tokens_bound
from backend_processes import json_result, run_on_backend
from bilm.layers.char_cnn import CharCNNEncoder

rng = np.random.default_rng(0)
# Words of 1 to 4 characters between <bow> and <eow>, then the padding char up to 20 columns; and a padding row.
ids = np.full((5, 20), 260, np.int32)
for row, length in enumerate([1, 4, 2, 3]):
    ids[row, 0], ids[row, 1:1 + length], ids[row, 1 + length] = 258, rng.integers(1, 256, size=length), 259
ids[4] = 0
layer = CharCNNEncoder(261, 4, [[1, 2], [2, 3], [3, 4]])
layer.build((None, None, 20))
for weight in layer.weights:
    weight.assign(rng.normal(size=weight.shape).astype(np.float32))
bound = distinct_tokens_bound([ids], jax.devices("cpu")[:1], widest_filter=3)

def encoded(ids, bound):
    with distinct_tokens_at_most(bound):
        return layer(ids[None])[0]

trimmed, whole = (np.asarray(jax.jit(encoded, static_argnums=1)(jnp.asarray(ids), b)) for b in (bound, None))
print(json.dumps({"bound": bound, "max_difference": float(np.abs(trimmed - whole).max()),
                  "max_value": float(np.abs(whole).max())}))
"""


@pytest.mark.slow  # JAX in a process of its own
def test_on_jax_the_columns_past_every_words_characters_change_nothing():
    """Within the bounds of a training step on one CPU, JAX's char CNN reads only the columns up to the longest
    word's end and the widest filter past it: 6 + 3 columns here, rounded up to 12 of the 20."""
    result = json_result(run_on_backend("jax", ON_JAX))
    assert result["bound"] == [5, 12], result  # 5 distinct rows (all of them), 12 columns
    assert result["max_value"] > 0.1 and result["max_difference"] <= 1e-6 * result["max_value"], result
