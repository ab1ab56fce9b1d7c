"""The opt-in bfloat16 matmuls of training: what is rounded, and what stays float32."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.highway import Highway
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.ops.matmul_dtype import matmul
from bilm.ops.sampled_softmax import log_uniform_candidates, sampled_softmax_loss
from bilm.training.objective import TrainingLM
from bilm.training.settings import training_settings
from training_helpers import MAX_CHARS, tiny_options

# bfloat16 keeps 8 significant bits: one rounding to nearest is off by at
# most half a unit in the last place, 2**-8 relative.
BF16_ROUNDING = 2.0 ** -8


def to_bfloat16_and_back(x):
    return tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy().astype(np.float64)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True)])
def test_bfloat16_matmul_rounds_operands_and_result_once(transpose_a, transpose_b):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 300) if not transpose_a else (300, 40)).astype(np.float32)
    b = rng.normal(size=(300, 24) if not transpose_b else (24, 300)).astype(np.float32)
    got = matmul(a, b, "bfloat16", transpose_a=transpose_a, transpose_b=transpose_b).numpy()
    a64, b64 = to_bfloat16_and_back(a), to_bfloat16_and_back(b)
    exact = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    assert got.dtype == np.float32 and got.shape == (40, 24)
    # Accumulated in float32 and rounded once: within one bfloat16 rounding
    # of the exact product of the rounded operands (a bfloat16 accumulation
    # over 300 terms would be off by far more).
    np.testing.assert_array_less(np.abs(got - exact), BF16_ROUNDING * np.abs(exact) + 1e-6)
    full = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
    assert np.abs(got - full).max() > 1e-3  # the operands really were rounded
    np.testing.assert_allclose(matmul(a, b, "float32", transpose_a, transpose_b).numpy(), full, rtol=1e-4, atol=1e-4)


def test_bfloat16_matmul_gradients_are_close_to_float32_ones():
    rng = np.random.default_rng(1)
    a = tf.constant(rng.normal(size=(30, 64)), tf.float32)
    b = tf.constant(rng.normal(size=(64, 20)), tf.float32)
    upstream = tf.constant(rng.normal(size=(30, 20)), tf.float32)
    grads = {}
    for dtype in ("float32", "bfloat16"):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            y = tf.reduce_sum(matmul(a, b, dtype) * upstream)
        grads[dtype] = [g.numpy() for g in tape.gradient(y, [a, b])]
        assert all(g.dtype == np.float32 for g in grads[dtype])
    for g16, g32 in zip(grads["bfloat16"], grads["float32"]):
        np.testing.assert_allclose(g16, g32, rtol=0.03, atol=0.03 * np.abs(g32).max())
        assert not np.array_equal(g16, g32)


def test_unknown_matmul_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="matmul_dtype must be one of 'float32', 'bfloat16', got 'float16'"):
        matmul(tf.ones([2, 2]), tf.ones([2, 2]), "float16")
    with pytest.raises(ValueError, match="matmul_dtype must be one of"):
        Highway(1, matmul_dtype="half")


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


def test_lstm_input_half_uses_bfloat16_in_training_only():
    rng = np.random.default_rng(3)
    inputs = tf.constant(rng.normal(size=(4, 6, 12)), tf.float32)
    lengths = tf.constant([6, 3, 5, 1])
    layers = {dtype: ProjectedLSTM(16, 8, 3.0, 3.0, matmul_dtype=dtype) for dtype in ("float32", "bfloat16")}
    for layer in layers.values():
        layer.build((None, None, 12))
    layers["bfloat16"].set_weights(layers["float32"].get_weights())
    reference = [t.numpy() for t in layers["float32"](inputs, lengths, training=True)]
    inference = [t.numpy() for t in layers["bfloat16"](inputs, lengths, training=False)]
    trained = [t.numpy() for t in layers["bfloat16"](inputs, lengths, training=True)]
    for got_inference, got_trained, want in zip(inference, trained, reference):
        np.testing.assert_allclose(got_inference, want, atol=1e-6)
        np.testing.assert_allclose(got_trained, want, atol=0.02)
    assert not np.allclose(trained[0], reference[0], atol=1e-6)
    assert ProjectedLSTM.from_config(layers["bfloat16"].get_config()).matmul_dtype == "bfloat16"


def test_sampled_softmax_with_bfloat16_matmuls_is_close_to_float32():
    rng = np.random.default_rng(4)
    n_vocab, dim, rows = 50, 16, 30
    weights = tf.Variable(rng.normal(size=(n_vocab, dim)) / 4, dtype=tf.float32)
    biases = tf.Variable(rng.normal(size=(n_vocab,)), dtype=tf.float32)
    inputs = tf.constant(rng.normal(size=(rows, dim)), tf.float32)
    labels = tf.constant(rng.integers(0, n_vocab, size=rows))
    candidates = log_uniform_candidates(labels, 20, n_vocab, tf.constant([5, 6]))
    results = {}
    for dtype in ("float32", "bfloat16"):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            losses = sampled_softmax_loss(weights, biases, inputs, labels, candidates, dtype)
            total = tf.reduce_sum(losses)
        grads = tape.gradient(total, [inputs, weights, biases])
        results[dtype] = [losses.numpy()] + [tf.convert_to_tensor(g).numpy() for g in grads]
    for got, want in zip(results["bfloat16"], results["float32"]):
        np.testing.assert_allclose(got, want, rtol=0.02, atol=0.02 * np.abs(want).max())
    assert not np.array_equal(results["bfloat16"][0], results["float32"][0])


def test_training_model_takes_matmul_dtype_from_the_options_for_training_steps_only():
    lms = {dtype: TrainingLM(*training_settings(tiny_options(matmul_dtype=dtype))) for dtype in ("float32", "bfloat16")}
    lms["bfloat16"].bilm.set_weights(lms["float32"].bilm.get_weights())
    for lm in lms.values():
        lm.softmax_weights.assign(lms["float32"].softmax_weights)
    rng = np.random.default_rng(5)
    ids = tf.constant(rng.integers(0, 261, size=(4, 5, MAX_CHARS)), tf.int32)
    labels = tf.constant(rng.integers(0, 20, size=(4, 5)), tf.int32)
    batch = {"token_characters": ids, "token_characters_reverse": ids[:, ::-1],
             "next_token_id": labels, "next_token_id_reverse": labels[:, ::-1]}
    zeros = lms["float32"].zero_states(4)
    seed = tf.constant([3, 4], tf.int64)
    tops = {dtype: lm.run(batch, zeros, training=True)[0]["forward"].numpy() for dtype, lm in lms.items()}
    assert not np.array_equal(tops["bfloat16"], tops["float32"])  # the biLM's layers, not only the softmax
    trained = {dtype: float(lm.losses(batch, zeros, training=True, seed=seed)[0]) for dtype, lm in lms.items()}
    evaluated = {dtype: float(lm.losses(batch, zeros)[0]) for dtype, lm in lms.items()}
    assert trained["bfloat16"] != trained["float32"] and abs(trained["bfloat16"] - trained["float32"]) < 0.05
    # With float32 layers, the softmax alone still takes bfloat16 operands.
    for layer in lms["bfloat16"].bilm.layers:
        if hasattr(layer, "matmul_dtype"):
            layer.matmul_dtype = "float32"
    softmax_only = float(lms["bfloat16"].losses(batch, zeros, training=True, seed=seed)[0])
    assert softmax_only != trained["float32"] and abs(softmax_only - trained["float32"]) < 0.05
    assert evaluated["bfloat16"] == evaluated["float32"]
