import keras
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.layer_mix import WeightLayers, weight_layers
from layer_testing import run_layer_test

BATCH, N_LAYERS, TIME, DIM = 2, 3, 4, 2


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    lm = rng.normal(size=(BATCH, N_LAYERS, TIME, DIM)).astype("float32")
    # Second sentence has two padded positions; give them large values so a
    # statistic that wrongly includes them is noticed.
    lm[1, :, 2:, :] = 50.0
    mask = np.array([[True] * 4, [True, True, False, False]])
    return lm, mask


def _ref_layer_norm(h, mask):
    # h: (batch, time, dim); one scalar mean/variance over unmasked entries.
    m = mask.astype("float64")[:, :, None]
    n = m.sum() * h.shape[-1]
    mean = (h * m).sum() / n
    var = (((h * m - mean) * m) ** 2).sum() / n
    return (h - mean) / np.sqrt(var + 1e-12)


def _ref(lm, mask, W=None, gamma=1.0, use_top_only=False, do_layer_norm=False):
    lm = lm.astype("float64")
    layers = [lm[:, j] for j in range(lm.shape[1])]
    if do_layer_norm:
        layers = [_ref_layer_norm(h, mask) for h in layers]
    if use_top_only:
        return gamma * layers[-1]
    logits = np.asarray(W, "float64") + 1.0 / len(layers)
    s = np.exp(logits) / np.exp(logits).sum()
    return gamma * sum(s_j * h for s_j, h in zip(s, layers))


@pytest.mark.parametrize(
    "use_top_only,do_layer_norm",
    [(False, False), (True, False), (False, True), (True, True)],
)
def test_modes_match_reference_with_default_and_assigned_weights(
    use_top_only, do_layer_norm
):
    lm, mask = _inputs()
    layer = WeightLayers(use_top_only=use_top_only, do_layer_norm=do_layer_norm)
    out = layer(lm, mask=mask)
    assert tuple(out.shape) == (BATCH, TIME, DIM)
    W = np.zeros(N_LAYERS)
    np.testing.assert_allclose(
        out, _ref(lm, mask, W, 1.0, use_top_only, do_layer_norm), atol=1e-5
    )

    W = np.array([0.5, -1.0, 2.0])
    if use_top_only:
        assert layer.W is None
    else:
        layer.W.assign(W)
    layer.gamma.assign([1.7])
    out = layer(lm, mask=mask)
    np.testing.assert_allclose(
        out, _ref(lm, mask, W, 1.7, use_top_only, do_layer_norm), atol=1e-5
    )


def test_layer_norm_ignores_padded_values_in_statistics():
    lm, mask = _inputs()
    layer = WeightLayers(do_layer_norm=True)
    out_a = layer(lm, mask=mask)
    lm_b = lm.copy()
    lm_b[1, :, 2:, :] = -7.0  # only padded positions change
    out_b = layer(lm_b, mask=mask)
    np.testing.assert_allclose(
        np.asarray(out_a)[0], np.asarray(out_b)[0], atol=1e-5
    )
    np.testing.assert_allclose(
        np.asarray(out_a)[1, :2], np.asarray(out_b)[1, :2], atol=1e-5
    )


def test_no_mask_means_all_valid():
    lm, _ = _inputs()
    layer = WeightLayers(do_layer_norm=True)
    all_valid = np.ones((BATCH, TIME), bool)
    np.testing.assert_allclose(
        layer(lm), _ref(lm, all_valid, np.zeros(N_LAYERS), do_layer_norm=True),
        atol=1e-5,
    )


def test_weights_and_names():
    layer = WeightLayers(name="input_ELMo")
    layer(_inputs()[0])
    assert sorted(v.path for v in layer.trainable_weights) == [
        "input_ELMo/W", "input_ELMo/gamma"
    ]
    np.testing.assert_array_equal(layer.W.numpy(), np.zeros(N_LAYERS))
    np.testing.assert_array_equal(layer.gamma.numpy(), [1.0])
    top = WeightLayers(use_top_only=True)
    top(_inputs()[0])
    assert [v.name for v in top.trainable_weights] == ["gamma"]


def test_l2_loss_eager_and_function_api():
    lm, mask = _inputs()
    W = np.array([0.5, -1.0, 2.0])
    expected = 0.01 * np.sum(W**2)
    result = weight_layers("input", {"lm_embeddings": lm, "mask": mask},
                           l2_coef=0.01)
    layer = result["layer"]
    assert layer.name == "input_ELMo"
    assert len(layer.losses) == 1
    np.testing.assert_allclose(result["regularization_op"], 0.0, atol=1e-7)

    layer.W.assign(W)
    result = weight_layers("input", {"lm_embeddings": lm, "mask": mask},
                           layer=layer)
    assert len(layer.losses) == 1  # losses are reset at each outer call
    np.testing.assert_allclose(layer.losses[0], expected, rtol=1e-6)
    np.testing.assert_allclose(result["regularization_op"], expected, rtol=1e-6)
    np.testing.assert_allclose(layer.regularization_loss(), expected, rtol=1e-6)
    np.testing.assert_allclose(
        result["weighted_op"], _ref(lm, mask, W), atol=1e-5
    )


@pytest.mark.parametrize("kwargs", [{}, {"l2_coef": 0.01, "use_top_only": True}])
def test_no_l2_loss_without_coef_or_with_top_only(kwargs):
    lm, mask = _inputs()
    result = weight_layers("x", {"lm_embeddings": lm, "mask": mask}, **kwargs)
    assert result["layer"].losses == []
    assert float(result["regularization_op"]) == 0.0


def _shared_model(layer):
    q = keras.Input((N_LAYERS, TIME, DIM), name="question")
    q_mask = keras.Input((TIME,), dtype="bool", name="question_mask")
    c = keras.Input((N_LAYERS, TIME, DIM), name="context")
    c_mask = keras.Input((TIME,), dtype="bool", name="context_mask")
    q_out = weight_layers("input", {"lm_embeddings": q, "mask": q_mask},
                          layer=layer)["weighted_op"]
    c_out = weight_layers("input", {"lm_embeddings": c, "mask": c_mask},
                          layer=layer)["weighted_op"]
    return keras.Model([q, q_mask, c, c_mask], [q_out, c_out])


def test_functional_model_losses_and_sharing():
    lm_q, mask_q = _inputs(0)
    lm_c, mask_c = _inputs(1)
    mask_c = np.array([[True, False, False, False], [True] * 4])
    layer = WeightLayers(l2_coef=0.1, do_layer_norm=True, name="input_ELMo")
    model = _shared_model(layer)
    assert len(model.trainable_weights) == 2  # one W, one gamma

    W = np.array([1.0, 0.0, -2.0])
    layer.W.assign(W)
    layer.gamma.assign([0.5])
    q_out, c_out = model([lm_q, mask_q, lm_c, mask_c])
    np.testing.assert_allclose(
        q_out, _ref(lm_q, mask_q, W, 0.5, do_layer_norm=True), atol=1e-5
    )
    np.testing.assert_allclose(
        c_out, _ref(lm_c, mask_c, W, 0.5, do_layer_norm=True), atol=1e-5
    )
    # The shared layer contributes a single L2 term (W's regularizer), like
    # bilm-tf's one regulariser per variable.
    assert len(model.losses) == 1
    np.testing.assert_allclose(model.losses[0], 0.1 * np.sum(W**2), rtol=1e-6)

    # The output mask is the time mask, for downstream layers.
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(
        q_out._keras_mask), mask_q)


def test_shared_gradients_flow_from_both_inputs():
    lm_q, mask_q = _inputs(0)
    lm_c, mask_c = _inputs(1)
    layer = WeightLayers()
    with tf.GradientTape(persistent=True) as tape:
        q = layer(lm_q, mask=mask_q)
        c = layer(lm_c, mask=mask_c)
        # Weighted sum so that W's gradient does not cancel out.
        loss_q = tf.reduce_sum(q * tf.range(1.0, DIM + 1.0))
        loss_c = tf.reduce_sum(c * tf.range(1.0, DIM + 1.0))
    assert len(layer.trainable_weights) == 2
    for loss in (loss_q, loss_c):
        grads = tape.gradient(loss, [layer.W, layer.gamma])
        assert all(g is not None for g in grads)
        assert np.abs(grads[0].numpy()).max() > 1e-4
        assert abs(float(grads[1][0])) > 1e-4


def test_fit_step_includes_l2_and_updates_W():
    lm, mask = _inputs()
    inp = keras.Input((N_LAYERS, TIME, DIM))
    inp_mask = keras.Input((TIME,), dtype="bool")
    layer = WeightLayers(l2_coef=1.0)
    model = keras.Model([inp, inp_mask], layer(inp, mask=inp_mask))
    layer.W.assign([1.0, 2.0, 3.0])
    # Zero inputs and targets: the data loss is 0, the total is only L2.
    zeros = np.zeros_like(lm)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    loss = model.train_on_batch([zeros, mask], np.zeros((BATCH, TIME, DIM)))
    np.testing.assert_allclose(loss, 14.0, rtol=1e-5)
    # SGD on W ** 2: W <- W - 0.1 * 2 * W.
    np.testing.assert_allclose(layer.W.numpy(), [0.8, 1.6, 2.4], rtol=1e-5)


def test_tf_function():
    lm, mask = _inputs()
    layer = WeightLayers(l2_coef=0.5, do_layer_norm=True)
    layer(lm, mask=mask)
    layer.W.assign([0.2, 0.4, -0.3])

    @tf.function
    def run(x, m):
        out = layer(x, mask=m)
        return out, layer.losses

    out, losses = run(tf.constant(lm), tf.constant(mask))
    np.testing.assert_allclose(
        out, _ref(lm, mask, [0.2, 0.4, -0.3], do_layer_norm=True), atol=1e-5
    )
    np.testing.assert_allclose(losses[0], 0.5 * 0.29, rtol=1e-6)


def test_keras_attached_mask_is_used_and_propagated():
    lm, mask = _inputs()
    x = tf.constant(lm)
    x._keras_mask = tf.constant(np.repeat(mask[:, None, :], N_LAYERS, axis=1))
    layer = WeightLayers(do_layer_norm=True)
    out = layer(x)
    np.testing.assert_allclose(
        out, _ref(lm, mask, np.zeros(N_LAYERS), do_layer_norm=True), atol=1e-5
    )
    np.testing.assert_array_equal(out._keras_mask.numpy(), mask)


def test_gradient_wrt_W_is_nonzero():
    lm, mask = _inputs()
    layer = WeightLayers(l2_coef=0.0)
    layer(lm, mask=mask)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(layer(lm, mask=mask)))
    grad = tape.gradient(loss, layer.W)
    assert grad is not None
    assert np.abs(grad.numpy()).max() > 1e-3


@pytest.mark.parametrize("kwargs, n_weights, n_losses", [
    # Every argument is in the config and comes back from it, the name too.
    ({"l2_coef": 0.001, "use_top_only": False, "do_layer_norm": True, "name": "context_ELMo"}, 2, 1),
    ({"use_top_only": True}, 1, 0),
])
def test_layer_contract(kwargs, n_weights, n_losses):
    lm, mask = _inputs()
    run_layer_test(WeightLayers, kwargs, {"lm_embeddings": lm, "mask": mask},
                   expected_output_shape=(BATCH, TIME, DIM), expected_num_trainable_weights=n_weights,
                   expected_output_dtype="float32", supports_masking=True, expected_mask_shape=(BATCH, TIME),
                   expected_num_losses=n_losses)


def test_bad_rank_raises():
    layer = WeightLayers()
    with pytest.raises(ValueError, match=r"rank 4.*Received: shape=\(2, 4, 2\)"):
        layer(np.zeros((2, 4, 2), "float32"))
    layer(np.zeros((2, 3, 4, 2), "float32"))
    with pytest.raises(ValueError, match=r"Received: shape=\(3, 4, 2\)"):
        layer(np.zeros((3, 4, 2), "float32"))
