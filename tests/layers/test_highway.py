"""Highway: bfloat16 matmuls in training, bfloat16 inference (its kernels and tolerance), both dtypes
through the config."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.highway import Highway
from bilm.ops.matmul_dtype import BFLOAT16_INFERENCE_TOLERANCE


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
    restored = Highway.from_config(layers["bfloat16"].get_config())
    assert restored.training_matmul_dtype == "bfloat16"


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
    assert Highway.from_config(layers["bfloat16"].get_config()).kernel_dtype == "bfloat16"
