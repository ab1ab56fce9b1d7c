"""Highway: the layer contract, the highway formula, bfloat16 matmuls in training, bfloat16 inference (its
kernels and tolerance), both dtypes through the config."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.highway import Highway
from bilm.ops.matmul_dtype import BFLOAT16_INFERENCE_TOLERANCE
from layer_testing import run_layer_test

X = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("kwargs", [
    {"n_layers": 2},
    {"n_layers": 0},
    # The config keeps both dtypes; a bfloat16-kernel layer refuses training, so it takes no step.
    {"n_layers": 1, "training_matmul_dtype": "bfloat16"},
    {"n_layers": 1, "kernel_dtype": "bfloat16"},
])
def test_layer_contract(kwargs):
    # Each layer: carry kernel and bias, transform kernel and bias.
    run_layer_test(Highway, kwargs, X, expected_output_shape=(2, 3, 4),
                   expected_num_trainable_weights=4 * kwargs["n_layers"], expected_output_dtype="float32",
                   run_training_check=kwargs.get("kernel_dtype") != "bfloat16")


def test_each_layer_mixes_the_transform_and_the_input_by_the_carry_gate():
    layer = Highway(2)
    layer.build(X.shape)
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in layer.weights]
    layer.set_weights(weights)
    x = X.reshape(-1, 4).astype(np.float64)
    for k in range(2):
        carry_kernel, carry_bias, transform_kernel, transform_bias = weights[4 * k:4 * k + 4]
        gate = 1.0 / (1.0 + np.exp(-(x @ carry_kernel + carry_bias)))
        x = gate * np.maximum(x @ transform_kernel + transform_bias, 0.0) + (1.0 - gate) * x
    np.testing.assert_allclose(layer(X).numpy(), x.reshape(X.shape), rtol=1e-5, atol=1e-5)


def test_the_carry_bias_starts_at_minus_2_and_the_transform_bias_at_0():
    layer = Highway(1)
    layer.build(X.shape)
    np.testing.assert_array_equal(layer.carry_biases[0].numpy(), -2.0)
    np.testing.assert_array_equal(layer.transform_biases[0].numpy(), 0.0)


def _highway_pair(features=48):
    layers = {dtype: Highway(2, training_matmul_dtype=dtype) for dtype in ("float32", "bfloat16")}
    for layer in layers.values():
        layer.build((None, features))
    layers["bfloat16"].set_weights(layers["float32"].get_weights())
    return layers


def test_highway_uses_bfloat16_in_training_only():
    layers = _highway_pair()
    x = tf.constant(np.random.default_rng(2).normal(size=(5, 7, 48)), tf.float32)
    reference = layers["float32"](x, training=True).numpy()
    np.testing.assert_array_equal(layers["bfloat16"](x, training=False).numpy(), reference)
    trained = layers["bfloat16"](x, training=True).numpy()
    np.testing.assert_allclose(trained, reference, rtol=0.03, atol=0.03)
    assert not np.array_equal(trained, reference)


def test_bfloat16_inference_highway_keeps_bfloat16_kernels_within_its_tolerance():
    """`kernel_dtype="bfloat16"`: the kernels are kept in
    bfloat16, and each output vector is within `BFLOAT16_INFERENCE_TOLERANCE`
    (3%, relative, Euclidean) of float32's: a layer rounds x and its kernels
    to 2**-9 relative and the gates (slopes at most 1/4 and 1) do not
    amplify it, so two layers stay near 2**-9 (0.2% here); the output must
    still differ, so bfloat16 was used."""
    layers = {dtype: Highway(2, kernel_dtype=dtype, name="highway") for dtype in ("float32", "bfloat16")}
    for layer in layers.values():
        layer.build((None, 48))
    layers["bfloat16"].set_weights(layers["float32"].get_weights())
    assert {w.dtype for w in layers["bfloat16"].carry_kernels + layers["bfloat16"].transform_kernels} == {"bfloat16"}
    assert {w.dtype for w in layers["bfloat16"].carry_biases} == {"float32"}
    x = tf.constant(np.random.default_rng(3).normal(size=(5, 7, 48)), tf.float32)
    want, got = (layers[dtype](x).numpy().astype(np.float64) for dtype in ("float32", "bfloat16"))
    deviations = np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)
    assert 1e-5 < deviations.max() < BFLOAT16_INFERENCE_TOLERANCE
    with pytest.raises(ValueError, match=r"Highway 'highway' keeps its kernels in bfloat16 .* training=True"):
        layers["bfloat16"](x, training=True)


def test_int8_layer_contract():
    run_layer_test(Highway, {"n_layers": 2, "kernel_dtype": "int8"}, X, expected_output_shape=(2, 3, 4),
                   expected_num_trainable_weights=4, expected_num_non_trainable_weights=8,
                   expected_output_dtype="float32", run_training_check=False)


@pytest.mark.parametrize("rows", [5, 300])
def test_int8_highway_equals_float32_over_its_dequantized_kernels(rows):
    # int8 kernels with per-column scales, float32 activations: bilm's
    # kernel for few rows, a float32 product with the widened kernel for more.
    layers = {dtype: Highway(2, kernel_dtype=dtype, name="highway") for dtype in ("float32", "int8")}
    for layer in layers.values():
        layer.build((None, 48))
    for q, f in zip(layers["int8"].carry_kernels + layers["int8"].transform_kernels,
                    layers["float32"].carry_kernels + layers["float32"].transform_kernels):
        q.assign(f.numpy())
        f.assign(q.numpy())
    x = tf.constant(np.random.default_rng(rows).normal(size=(rows, 48)), tf.float32)
    np.testing.assert_allclose(layers["int8"](x).numpy(), layers["float32"](x).numpy(), rtol=1e-5, atol=2e-6)
    with pytest.raises(ValueError, match=r"Highway 'highway' keeps its kernels in int8 .* training=True"):
        layers["int8"](x, training=True)


def test_a_given_kernel_initializer_replaces_the_original_draws_and_is_in_the_config():
    layer = Highway(2, kernel_initializer="zeros")
    layer.build((None, 6))
    assert not any(np.any(k.numpy()) for k in layer.carry_kernels + layer.transform_kernels)
    again = Highway.from_config(layer.get_config())
    again.build((None, 6))
    assert not np.any(again.carry_kernels[1].numpy())
    default = Highway(1)
    default.build((None, 6))
    assert np.any(default.carry_kernels[0].numpy())
