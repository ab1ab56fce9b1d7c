"""TrainingLM: its layout against the prediction layout, dropout seeds, the full-softmax losses, matmul_dtype."""
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.io.formats.weight_file import load_bilm_weights
from bilm.models.functional_bilm import build_bilm
from bilm.training.config.settings import training_settings
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import MAX_CHARS, tiny_options


def test_training_layout_matches_the_prediction_layout():
    """The backward stack reading the reversed stream left to right equals the
    prediction layout's backward stack reading the window right to left."""
    options = tiny_options()
    lm = TrainingLM(*training_settings(options))
    prediction = build_bilm(lm.options, layout="prediction")
    prediction.set_weights(lm.network.get_weights())
    ids = tf.constant(np.random.default_rng(0).integers(0, 261, size=(3, 6, MAX_CHARS)), tf.int32)
    zeros = lm.zero_states(3)
    reference = prediction({"token_characters": ids, **zeros})
    tops, finals = lm.run({"token_characters": ids, "token_characters_reverse": ids[:, ::-1]}, zeros)
    np.testing.assert_allclose(tops["forward"].numpy(), reference["forward_1"].numpy(), atol=1e-6)
    np.testing.assert_allclose(tops["backward"].numpy()[:, ::-1], reference["backward_1"].numpy(), atol=1e-6)
    for key, value in finals.items():
        np.testing.assert_allclose(value.numpy(), reference[f"final_{key}"].numpy(), atol=1e-6)
    assert np.abs(reference["backward_1"].numpy()).max() > 0.01


def test_dropout_masks_follow_the_seed():
    options = tiny_options(dropout=0.5)
    lm = TrainingLM(*training_settings(options))
    ids = tf.constant(np.random.default_rng(0).integers(0, 261, size=(2, 5, MAX_CHARS)), tf.int32)
    batch = {"token_characters": ids, "token_characters_reverse": ids[:, ::-1]}
    zeros = lm.zero_states(2)
    seed = tf.constant([1, 2], tf.int64)
    first, _ = lm.run(batch, zeros, training=True, dropout_seed=seed)
    again, _ = lm.run(batch, zeros, training=True, dropout_seed=seed)
    other, _ = lm.run(batch, zeros, training=True, dropout_seed=tf.constant([1, 3], tf.int64))
    plain, _ = lm.run(batch, zeros, training=False)
    np.testing.assert_array_equal(first["forward"].numpy(), again["forward"].numpy())
    assert not np.allclose(first["forward"].numpy(), other["forward"].numpy())
    assert not np.allclose(first["forward"].numpy(), plain["forward"].numpy())


def _cross_entropy(top, weights, biases, labels):
    logits = top.reshape(-1, top.shape[-1]) @ weights.T.astype(np.float64) + biases
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(logits.shape[0]), labels.reshape(-1)].mean()


def test_full_softmax_evaluation_matches_numpy_with_carried_states(tmp_path):
    options = tiny_options()
    lm = TrainingLM(*training_settings(options))
    weights = R.write_random_weights(str(tmp_path / "w.hdf5"), options, seed=3)
    load_bilm_weights(lm.network, str(tmp_path / "w.hdf5"))
    rng = np.random.default_rng(1)
    n_vocab, p = options["n_tokens_vocab"], options["lstm"]["projection_dim"]
    softmax_w = rng.normal(size=(n_vocab, p)).astype(np.float32)
    softmax_b = rng.normal(size=n_vocab).astype(np.float32)
    lm.softmax_weights.assign(softmax_w)
    lm.softmax_bias.assign(softmax_b)

    states = lm.zero_states(3)
    reference_states = R.zero_states(options, 3)
    for _ in range(2):
        batch = {key: rng.integers(0, 261, size=(3, 4, MAX_CHARS)).astype(np.int32)
                 for key in ("token_characters", "token_characters_reverse")}
        batch.update({key: rng.integers(0, n_vocab, size=(3, 4)).astype(np.int32)
                      for key in ("next_token_id", "next_token_id_reverse")})
        loss, per_direction, states = lm.evaluation_step(batch, states)

        # NumPy: prediction ids are shifted by one; the backward stack reads
        # the reversed-token stream left to right (flip it for the oracle).
        out_f = R.bilm_forward(weights, options, batch["token_characters"] + 1, reference_states)
        out_b = R.bilm_forward(weights, options, batch["token_characters_reverse"][:, ::-1] + 1,
                               reference_states)
        reference_states = {
            key: (out_f if key[0] == 0 else out_b)["final_states"][key] for key in reference_states}
        forward = _cross_entropy(out_f["layers"][-1][..., :p], softmax_w, softmax_b, batch["next_token_id"])
        backward = _cross_entropy(out_b["layers"][-1][..., p:][:, ::-1], softmax_w, softmax_b,
                                  batch["next_token_id_reverse"])
        np.testing.assert_allclose(float(per_direction["forward"]), forward, rtol=1e-5)
        np.testing.assert_allclose(float(per_direction["backward"]), backward, rtol=1e-5)
        np.testing.assert_allclose(float(loss), (forward + backward) / 2, rtol=1e-5)


@pytest.mark.slow
def test_training_model_takes_matmul_dtype_from_the_options_for_training_steps_only():
    lms = {dtype: TrainingLM(*training_settings(tiny_options(matmul_dtype=dtype))) for dtype in ("float32", "bfloat16")}
    lms["bfloat16"].network.set_weights(lms["float32"].network.get_weights())
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
    switched = [layer for layer in lms["bfloat16"].network.layers if hasattr(layer, "training_matmul_dtype")]
    assert switched  # the highway and the LSTMs
    for layer in switched:
        layer.training_matmul_dtype = "float32"
    softmax_only = float(lms["bfloat16"].losses(batch, zeros, training=True, seed=seed)[0])
    assert softmax_only != trained["float32"] and abs(softmax_only - trained["float32"]) < 0.05
    assert evaluated["bfloat16"] == evaluated["float32"]


def test_no_two_initial_variables_are_copies_of_each_other():
    keras.utils.set_random_seed(0)
    options = tiny_options()
    parsed, settings = training_settings(options)
    lm = TrainingLM(parsed, settings)
    drawn = {name: v.numpy().ravel() for name, v in lm.trainable_variables().items() if v.numpy().std() > 0}
    assert len(drawn) > 10
    for (a, x), (b, y) in itertools.combinations(drawn.items(), 2):
        n = min(x.size, y.size)
        z = abs(np.corrcoef(x[:n], y[:n])[0, 1]) * np.sqrt(n)
        assert z < 6.0, (a, b, z)
