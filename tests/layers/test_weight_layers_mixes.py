"""WeightLayers' mixes besides bilm-tf's scalar mix: frozen, average, top, dense, attention."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.layer_mix import MIXES, WeightLayers, weight_layers
from layer_testing import run_layer_test

BATCH, N_LAYERS, TIME, DIM = 2, 3, 4, 5
# (trainable, non-trainable) weight names of each mix.
WEIGHTS = {
    "scalar": (["W", "gamma"], []),
    "frozen": ([], ["W", "gamma"]),
    "average": (["gamma"], []),
    "top": (["gamma"], []),
    "dense": (["kernel", "bias"], []),
    "attention": (["v", "b", "gamma"], []),
}


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    lm = rng.normal(size=(BATCH, N_LAYERS, TIME, DIM)).astype("float32")
    mask = np.array([[True] * TIME, [True, True, False, False]])
    return lm, mask


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _reference(layer, lm):
    """The mix in NumPy float64, from the layer's current weights (no layer norm)."""
    lm = lm.astype("float64")
    get = {w.name: w.numpy().astype("float64") for w in layer.weights}
    if layer.kind in ("scalar", "frozen"):
        return get["gamma"] * np.einsum("l,bltd->btd", _softmax(get["W"]), lm)
    if layer.kind == "average":
        return get["gamma"] * lm.mean(axis=1)
    if layer.kind == "top":
        return get["gamma"] * lm[:, -1]
    if layer.kind == "dense":
        stacked = np.concatenate([lm[:, j] for j in range(N_LAYERS)], axis=-1)
        return stacked @ get["kernel"] + get["bias"]
    return get["gamma"] * np.einsum("blt,bltd->btd", _attention_weights(layer, lm), lm)


def _attention_weights(layer, lm):
    """An attention mix's per-token weights, `(batch, n_layers, time)`, in NumPy."""
    return _softmax(np.einsum("bltd,d->blt", lm, layer.v.numpy()) + layer.b.numpy()[None, :, None], axis=1)


def _perturb(layer, rng):
    """Moves every weight of the layer away from its start."""
    for weight in layer.weights:
        weight.assign(weight.numpy() + rng.normal(scale=0.3, size=weight.shape).astype("float32"))


@pytest.mark.parametrize("mix", MIXES)
def test_each_mix_matches_numpy_at_its_start_and_after_its_weights_move(mix):
    lm, mask = _inputs()
    layer = WeightLayers(mix=mix)
    out = layer(lm, mask=mask)
    assert tuple(out.shape) == (BATCH, TIME, DIM)
    np.testing.assert_allclose(out, _reference(layer, lm), atol=1e-5)
    if mix in ("scalar", "frozen", "dense", "attention"):
        # Each learnable mix (and the equal-weights frozen one) starts at the average.
        np.testing.assert_allclose(out, lm.mean(axis=1), atol=1e-5)
    _perturb(layer, np.random.default_rng(1))
    np.testing.assert_allclose(layer(lm, mask=mask), _reference(layer, lm), atol=1e-5)


@pytest.mark.parametrize("mix", MIXES)
def test_layer_contract(mix):
    lm, mask = _inputs()
    trainable, frozen = WEIGHTS[mix]
    kwargs = {"mix": mix, "l2_coef": 0.01, "do_layer_norm": True, "name": f"{mix}_ELMo"}
    if mix == "frozen":
        kwargs["seed"] = 3
    n_losses = {"scalar": 1, "dense": 1, "attention": 2}.get(mix, 0)
    run_layer_test(WeightLayers, kwargs, {"lm_embeddings": lm, "mask": mask},
                   expected_output_shape=(BATCH, TIME, DIM), expected_num_trainable_weights=len(trainable),
                   expected_num_non_trainable_weights=len(frozen), expected_output_dtype="float32",
                   supports_masking=True, expected_mask_shape=(BATCH, TIME), expected_num_losses=n_losses)


@pytest.mark.parametrize("mix", MIXES)
def test_gradients_reach_the_trainable_mix_weights_only(mix):
    lm, mask = _inputs()
    layer = WeightLayers(mix=mix)
    layer(lm, mask=mask)
    _perturb(layer, np.random.default_rng(2))  # away from the symmetric start, where some gradients vanish
    trainable, frozen = WEIGHTS[mix]
    assert sorted(w.name for w in layer.trainable_weights) == sorted(trainable)
    assert sorted(w.name for w in layer.non_trainable_weights) == sorted(frozen)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(lm, mask=mask) * tf.range(1.0, DIM + 1.0))
    for weight, gradient in zip(layer.trainable_weights, tape.gradient(loss, layer.trainable_weights)):
        assert gradient is not None and np.abs(gradient.numpy()).max() > 1e-4, weight.name


@pytest.mark.parametrize("seed", [None, 7])
def test_a_frozen_mix_does_not_move_in_training(seed):
    lm, mask = _inputs()
    inputs = keras.Input((N_LAYERS, TIME, DIM))
    mix = WeightLayers(mix="frozen", seed=seed, l2_coef=1.0)
    model = keras.Model(inputs, keras.layers.Dense(1)(mix(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    before = [w.numpy().copy() for w in mix.weights]
    model.fit(lm, np.ones((BATCH, TIME, 1)), epochs=3, verbose=0)
    for weight, old in zip(mix.weights, before):
        np.testing.assert_array_equal(weight.numpy(), old)
    assert model.losses == []  # nothing to regularise
    expected = np.zeros(N_LAYERS) if seed is None else np.random.default_rng(seed).normal(size=N_LAYERS)
    np.testing.assert_allclose(mix.W.numpy(), expected, rtol=1e-6)


def test_seeded_frozen_mixes_are_reproducible_and_differ_by_seed():
    lm, _ = _inputs()
    draws = {}
    for seed in (1, 1, 2):
        layer = WeightLayers(mix="frozen", seed=seed)
        layer(lm)
        draws.setdefault(seed, []).append(layer.layer_weights())
    np.testing.assert_array_equal(*draws[1])
    assert not np.allclose(draws[1][0], draws[2][0])
    assert not np.allclose(draws[1][0], 1 / N_LAYERS)


@pytest.mark.parametrize("mix", MIXES)
def test_every_mix_works_on_each_token_alone(mix):
    lm, mask = _inputs()
    layer = WeightLayers(mix=mix)
    layer(lm, mask=mask)
    _perturb(layer, np.random.default_rng(3))
    before = layer(lm, mask=mask).numpy()
    changed = lm.copy()
    changed[0, :, 2] += 1.0  # every layer of one token
    after = layer(changed, mask=mask).numpy()
    moved = np.abs(after - before).max(axis=-1) > 1e-6
    expected = np.zeros((BATCH, TIME), bool)
    expected[0, 2] = True
    np.testing.assert_array_equal(moved, expected)


def test_the_learned_functions_weight_each_token_differently():
    lm, mask = _inputs()
    attention = WeightLayers(mix="attention")
    attention(lm, mask=mask)
    attention.v.assign(np.linspace(-1, 1, DIM).astype("float32"))
    per_token = _attention_weights(attention, lm)  # (batch, n_layers, time)
    assert per_token.std(axis=(0, 2)).max() > 0.01  # not one weighting for all tokens
    np.testing.assert_allclose(per_token.sum(axis=1), 1.0, rtol=1e-6)
    dense = WeightLayers(mix="dense")
    dense(lm, mask=mask)
    # A kernel that reads only the top layer's features, mixed: no scalar mix can do that.
    kernel = np.zeros((N_LAYERS * DIM, DIM), "float32")
    kernel[-DIM:] = np.random.default_rng(0).normal(size=(DIM, DIM))
    dense.kernel.assign(kernel)
    np.testing.assert_allclose(dense(lm, mask=mask), lm[:, -1] @ kernel[-DIM:], atol=1e-5)


@pytest.mark.parametrize("mix", ["scalar", "dense", "attention"])
def test_l2_terms_pull_the_learned_mixes_toward_the_average(mix):
    lm, mask = _inputs()
    layer = WeightLayers(mix=mix, l2_coef=0.5)
    layer(lm, mask=mask)
    np.testing.assert_allclose(layer.regularization_loss(), 0.0, atol=1e-7)  # they start at the average
    start = {w.name: w.numpy().copy() for w in layer.weights}
    _perturb(layer, np.random.default_rng(4))
    regularised = {"scalar": ["W"], "dense": ["kernel"], "attention": ["v", "b"]}[mix]
    expected = sum(0.5 * np.sum((layer.weights[[w.name for w in layer.weights].index(name)].numpy()
                                 - start[name]) ** 2) for name in regularised)
    np.testing.assert_allclose(float(layer.regularization_loss()), expected, rtol=1e-5)
    np.testing.assert_allclose(float(sum(layer.losses)), expected, rtol=1e-5)


@pytest.mark.parametrize("mix", ["frozen", "average", "top"])
def test_fixed_mixes_have_no_l2_term(mix):
    lm, mask = _inputs()
    result = weight_layers("x", {"lm_embeddings": lm, "mask": mask}, l2_coef=0.5, mix=mix)
    assert result["layer"].losses == [] and float(result["regularization_op"]) == 0.0
    assert result["layer"].name == "x_ELMo" and result["layer"].mix == mix


def test_layer_weights():
    lm, mask = _inputs()
    layers = {mix: WeightLayers(mix=mix) for mix in MIXES}
    for layer in layers.values():
        layer(lm, mask=mask)
    for mix in ("scalar", "frozen", "average", "dense"):
        np.testing.assert_allclose(layers[mix].layer_weights(), np.full(N_LAYERS, 1 / N_LAYERS), rtol=1e-6)
    np.testing.assert_array_equal(layers["top"].layer_weights(), [0, 0, 1])
    layers["scalar"].W.assign([0.0, 1.0, 2.0])
    np.testing.assert_allclose(layers["scalar"].layer_weights(), _softmax(np.array([0.0, 1.0, 2.0])), rtol=1e-6)
    attention = layers["attention"]
    attention.v.assign(np.linspace(-1, 1, DIM).astype("float32"))
    per_token = _attention_weights(attention, lm).transpose(0, 2, 1)  # (batch, time, n_layers)
    np.testing.assert_allclose(attention.layer_weights(lm, mask), per_token[mask].mean(axis=0), rtol=1e-5)
    with pytest.raises(ValueError, match="pass lm_embeddings"):
        attention.layer_weights()
    with pytest.raises(ValueError, match="not built"):
        WeightLayers().layer_weights()


def test_keras_file_round_trip_of_every_mix_with_masking(tmp_path):
    # One model holds every mix (one save and load instead of one per mix).
    lm, mask = _inputs()
    inputs = keras.Input((N_LAYERS, TIME, DIM))
    time_mask = keras.Input((TIME,), dtype="bool")
    mixed = [WeightLayers(mix=mix, seed=5 if mix == "frozen" else None, l2_coef=0.01, name=mix)(inputs, mask=time_mask)
             for mix in MIXES]
    # The LSTM reads the mask the mixes pass on: padding changes nothing.
    outputs = keras.layers.LSTM(3)(keras.layers.Concatenate()(mixed))
    model = keras.Model([inputs, time_mask], outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit([lm, mask], np.ones((BATCH, 3)), verbose=0)
    padded = lm.copy()
    padded[1, :, 2:] = 100.0
    expected = model.predict([lm, mask], verbose=0)
    np.testing.assert_allclose(model.predict([padded, mask], verbose=0), expected, rtol=1e-6)
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    np.testing.assert_array_equal(reloaded.predict([lm, mask], verbose=0), expected)
    for mix in MIXES:
        mix_layer = reloaded.get_layer(mix)
        assert isinstance(mix_layer, WeightLayers) and mix_layer.mix == mix
        assert len(mix_layer.losses) == {"scalar": 1, "dense": 1, "attention": 2}.get(mix, 0)
        for weight, original in zip(mix_layer.weights, model.get_layer(mix).weights):
            np.testing.assert_array_equal(weight.numpy(), original.numpy())


@pytest.mark.parametrize("kwargs, message", [
    ({"mix": "learned"}, "mix must be one of"),
    ({"mix": "dense", "use_top_only": True}, "use_top_only=True is mix='top'"),
    ({"mix": "scalar", "seed": 1}, "takes none"),
])
def test_bad_arguments_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WeightLayers(**kwargs)
