"""Highway: bfloat16 matmuls in training only, and matmul_dtype through the config."""
import numpy as np
import tensorflow as tf

from bilm.layers.highway import Highway


def _highway_pair(features=48):
    layers = {dtype: Highway(2, matmul_dtype=dtype) for dtype in ("float32", "bfloat16")}
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
    assert restored.matmul_dtype == "bfloat16"
