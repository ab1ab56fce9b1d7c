"""ELMoEmbedding against BidirectionalLanguageModel(stateful=False) + WeightLayers."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.layers.layer_mix import WeightLayers
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.options import load_options
from bilm.text.batching import Batcher, TokenBatcher
from helpers import SENTENCES, write_model, write_vocab

P = 6  # projection_dim of helpers.write_model's default options
MIX_W = np.array([0.3, -0.5, 0.9], np.float32)
GAMMA = np.array([1.7], np.float32)


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    options_file, weight_file, _ = write_model(tmp_path_factory.mktemp("elmo"))
    return options_file, weight_file


def _tokens(sentences, extra=0):
    width = max(map(len, sentences)) + extra
    return tf.constant([s + [""] * (width - len(s)) for s in sentences])


def _reference(options_file, weight_file, ids, **mix_kwargs):
    """The outputs ELMoEmbedding should give, from the existing modules."""
    bilm = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, stateful=False)
    ops = bilm(ids)
    mix = WeightLayers(**mix_kwargs)
    mix.build(ops["lm_embeddings"].shape)
    if mix.W is not None:
        mix.W.assign(MIX_W)
    mix.gamma.assign(GAMMA)
    lm, mask = ops["lm_embeddings"].numpy(), ops["mask"].numpy()
    elmo = mix(ops["lm_embeddings"], mask=ops["mask"]).numpy()
    lengths = ops["lengths"].numpy()
    masked = elmo * mask[..., None]
    return {
        "word_emb": ops["token_embeddings"].numpy()[:, 1:-1] * mask[..., None],
        "lstm_outputs1": lm[:, 1], "lstm_outputs2": lm[:, 2], "elmo": elmo,
        "default": masked.sum(1) / np.maximum(lengths, 1)[:, None],
        "mask": mask, "sequence_len": lengths,
    }


def _set_mix(layer):
    layer.build()
    if layer.mix.W is not None:
        layer.mix.W.assign(MIX_W)
    layer.mix.gamma.assign(GAMMA)


def _assert_outputs_close(out, ref, valid_only=()):
    assert set(out) == set(ref)
    mask = ref["mask"]
    np.testing.assert_array_equal(out["mask"], mask)
    np.testing.assert_array_equal(out["sequence_len"], ref["sequence_len"])
    for name in ("word_emb", "lstm_outputs1", "lstm_outputs2", "elmo", "default"):
        got, want = np.asarray(out[name]), ref[name]
        assert got.shape == want.shape, name
        if name in valid_only:
            got, want = got[mask], want[mask]
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)
    assert np.abs(ref["elmo"][mask]).max() > 0.1  # not trivially zero


@pytest.mark.parametrize("input_form", ["tokens", "sentences", "char_ids"])
def test_outputs_equal_language_model_and_weight_layers(model_files, input_form):
    inputs = {
        "tokens": _tokens(SENTENCES),
        "sentences": tf.constant([" ".join(s) for s in SENTENCES]),
        "char_ids": Batcher(None, 7).batch_sentences(SENTENCES),
    }[input_form]
    layer = ELMoEmbedding.from_files(*model_files, output="all")
    _set_mix(layer)
    out = {k: v.numpy() for k, v in layer(inputs).items()}
    ref = _reference(*model_files, Batcher(None, 7).batch_sentences(SENTENCES))
    _assert_outputs_close(out, ref)
    # Each named output alone is the same tensor as in the dict.
    single = ELMoEmbedding.from_files(*model_files, output="lstm_outputs2", input_type=input_form)
    np.testing.assert_allclose(single(inputs).numpy(), ref["lstm_outputs2"], atol=1e-5)


@pytest.mark.slow
def test_layer_norm_and_top_only_match_weight_layers(model_files):
    ids = Batcher(None, 7).batch_sentences(SENTENCES)
    layer = ELMoEmbedding.from_files(*model_files, output="all", do_layer_norm=True)
    _set_mix(layer)
    out = {k: v.numpy() for k, v in layer(_tokens(SENTENCES)).items()}
    ref = _reference(*model_files, ids, do_layer_norm=True)
    # WeightLayers normalises padded positions too; the layer keeps them zero.
    _assert_outputs_close(out, ref, valid_only=("elmo",))
    assert not out["elmo"][~out["mask"]].any()
    top = ELMoEmbedding.from_files(*model_files, output="elmo", use_top_only=True)
    _set_mix(top)
    np.testing.assert_allclose(top(_tokens(SENTENCES)).numpy(), ref["lstm_outputs2"] * GAMMA, atol=1e-5)


def test_token_input_model(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path, char_cnn=False)
    vocab = write_vocab(tmp_path, ["The", "cat", "sat", ".", "a", "b"])
    embeddings = str(tmp_path / "embedding.hdf5")
    R.write_random_token_embeddings(embeddings, 9, P)
    layer = ELMoEmbedding.from_files(options_file, weight_file, output="lstm_outputs2",
                          embedding_weight_file=embeddings, vocab_file=vocab)
    ids = TokenBatcher(vocab).batch_sentences(SENTENCES)
    ref = BidirectionalLanguageModel(options_file, weight_file, use_character_inputs=False,
                                     embedding_weight_file=embeddings, stateful=False)(ids)
    want = ref["lm_embeddings"].numpy()[:, 2]
    np.testing.assert_allclose(layer(_tokens(SENTENCES)).numpy(), want, atol=1e-5)
    np.testing.assert_allclose(layer(ids).numpy(), want, atol=1e-5)
    with pytest.raises(ValueError, match="vocab_file"):
        ELMoEmbedding.from_files(options_file, weight_file, embedding_weight_file=embeddings)(_tokens(SENTENCES))
    with pytest.raises(ValueError, match="embedding_weight_file"):
        ELMoEmbedding.from_files(options_file, weight_file)


def test_stateless_outputs_do_not_depend_on_earlier_batches(model_files):
    layer = ELMoEmbedding.from_files(*model_files, output="lstm_outputs1")
    first = layer(_tokens(SENTENCES)).numpy()
    layer(_tokens(SENTENCES[::-1]))
    again = layer(_tokens(SENTENCES)).numpy()
    np.testing.assert_array_equal(first, again)
    alone = layer(_tokens(SENTENCES[3:4])).numpy()
    np.testing.assert_allclose(alone[0], first[3, :5], atol=1e-6)


def test_masking_propagates_to_downstream_layers(model_files):
    tokens = keras.Input(shape=(None,), dtype="string")
    elmo = ELMoEmbedding.from_files(*model_files)(tokens)
    # An LSTM without the mask would run over padded steps and change its state.
    model = keras.Model(tokens, keras.layers.LSTM(3)(elmo))
    short, long = model(_tokens(SENTENCES)).numpy(), model(_tokens(SENTENCES, extra=4)).numpy()
    np.testing.assert_allclose(short, long, atol=1e-6)
    assert np.abs(short).max() > 0
    layer = ELMoEmbedding.from_files(*model_files)
    np.testing.assert_array_equal(
        layer.compute_mask(_tokens(SENTENCES, extra=1)).numpy(),
        [[t < len(s) for t in range(8)] for s in SENTENCES])
    assert ELMoEmbedding.from_files(*model_files, output="default").compute_mask(_tokens(SENTENCES)) is None


def _tagger(model_files, **kwargs):
    tokens = keras.Input(shape=(None,), dtype="string")
    layer = ELMoEmbedding.from_files(*model_files, **kwargs)
    model = keras.Model(tokens, keras.layers.Dense(2, activation="softmax")(layer(tokens)))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    return model, layer


def _fit_one_step(model):
    tokens = _tokens(SENTENCES)
    tags = np.array([[t % 2 for t in range(tokens.shape[1])]] * len(SENTENCES))
    model.fit(tokens, tags, batch_size=len(SENTENCES), epochs=1, verbose=0)


def _snapshot(variables):
    return [v.numpy().copy() for v in variables]


def _changed(before, variables):
    return [not np.array_equal(b, v.numpy()) for b, v in zip(before, variables)]


@pytest.mark.slow
@pytest.mark.parametrize("kernel_dtype", ["float32", "bfloat16", "int8"])
def test_training_step_changes_the_mix_not_the_frozen_bilm(model_files, kernel_dtype):
    # bfloat16 and int8: the biLM's few-row products run bilm's own kernel,
    # whose gradient the training step's while loops ask for.
    model, layer = _tagger(model_files, kernel_dtype=kernel_dtype)
    assert {v.path.split("/")[-1] for v in layer.trainable_weights} == {"W", "gamma"}
    mix, bilm = _snapshot(layer.mix.weights), _snapshot(layer.network.weights)
    _fit_one_step(model)
    assert all(_changed(mix, layer.mix.weights))
    assert not any(_changed(bilm, layer.network.weights))
    # Freezing and unfreezing the layer keeps the biLM frozen.
    layer.trainable = False
    assert layer.trainable_weights == []
    layer.trainable = True
    assert len(layer.trainable_weights) == 2


@pytest.mark.slow
def test_trainable_bilm_fine_tunes_the_bilm(model_files):
    model, layer = _tagger(model_files, trainable_bilm=True)
    bilm = _snapshot(layer.network.weights)
    _fit_one_step(model)
    changed = _changed(bilm, layer.network.weights)
    assert sum(changed) > len(changed) // 2
    # The files are untouched: a new layer gives the original weights.
    fresh = ELMoEmbedding.from_files(*model_files)
    for before, variable in zip(bilm, fresh.network.weights):
        np.testing.assert_array_equal(before, variable.numpy())


def test_l2_coef_and_dropout(model_files):
    tokens = _tokens(SENTENCES)
    layer = ELMoEmbedding.from_files(*model_files, l2_coef=0.1, dropout=0.5)
    _set_mix(layer)
    plain = ELMoEmbedding.from_files(*model_files)
    _set_mix(plain)
    inference = layer(tokens, training=False).numpy()
    np.testing.assert_array_equal(inference, plain(tokens).numpy())
    assert len(layer.losses) == 1
    np.testing.assert_allclose(float(layer.losses[0]), 0.1 * np.sum(MIX_W ** 2), rtol=1e-6)
    assert plain.losses == []
    dropped = layer(tokens, training=True).numpy()
    assert np.any((dropped == 0) & (inference != 0))
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], inference[kept] * 2, rtol=1e-5)


@pytest.mark.slow
def test_keras_file_round_trip(model_files, tmp_path):
    model, layer = _tagger(model_files, output="elmo", do_layer_norm=True)
    _fit_one_step(model)
    tokens = _tokens(SENTENCES)
    expected = model(tokens).numpy()
    path = str(tmp_path / "tagger.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    np.testing.assert_array_equal(reloaded(tokens).numpy(), expected)
    elmo_layer = [lay for lay in reloaded.layers if isinstance(lay, ELMoEmbedding)][0]
    np.testing.assert_array_equal(elmo_layer.mix.W.numpy(), layer.mix.W.numpy())
    assert len(elmo_layer.trainable_weights) == 2 and elmo_layer.do_layer_norm


def test_keras_file_reloads_without_the_model_files(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path, seed=3)
    model, _ = _tagger((options_file, weight_file), output="lstm_outputs1")
    tokens = _tokens(SENTENCES)
    expected = model(tokens).numpy()
    path = str(tmp_path / "tagger.keras")
    model.save(path)
    os.remove(options_file)
    os.remove(weight_file)
    reloaded = keras.models.load_model(path)
    np.testing.assert_array_equal(reloaded(tokens).numpy(), expected)


def test_config_round_trip(model_files):
    layer = ELMoEmbedding.from_files(*model_files, output="default", trainable_mix=False, l2_coef=0.01,
                          input_type="tokens", max_batch_size=9, name="my_elmo")
    config = layer.get_config()
    clone = ELMoEmbedding.from_config(config)
    assert clone.get_config() == config
    assert config["output"] == "default"
    # The config is the architecture: no file paths, the options themselves.
    assert not {"options_file", "weight_file", "embedding_weight_file", "vocab_file"} & set(config)
    assert config["options"] == load_options(model_files[0]).for_prediction().to_dict()
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(clone(_tokens(SENTENCES)).numpy(), layer(_tokens(SENTENCES)).numpy())
    assert clone.trainable_weights == []


def test_all_padding_and_empty_batches(model_files):
    for do_layer_norm in (False, True):
        layer = ELMoEmbedding.from_files(*model_files, output="all", do_layer_norm=do_layer_norm)
        out = layer(tf.constant([["", "", ""], ["", "", ""]]))
        assert out["elmo"].shape == (2, 3, 2 * P) and out["default"].shape == (2, 2 * P)
        assert not out["mask"].numpy().any()
        np.testing.assert_array_equal(out["sequence_len"].numpy(), [0, 0])
        for name in ("word_emb", "lstm_outputs1", "lstm_outputs2", "elmo", "default"):
            assert np.all(out[name].numpy() == 0), name
        empty = layer(tf.zeros([0, 4], tf.string))
        assert empty["elmo"].shape == (0, 4, 2 * P) and empty["mask"].shape == (0, 4)
        blank = layer(tf.constant(["", " "]))
        assert blank["elmo"].shape == (2, 0, 2 * P)


@pytest.mark.parametrize("inputs, error, message", [
    (tf.constant([[1, 2, 3]]), ValueError, r"\(batch, time \+ 2, 7\)"),
    (tf.constant([[1.0, 2.0]]), TypeError, "float32"),
    (tf.constant([[["a"]]]), ValueError, "rank 2"),
    (tf.zeros([2, 1, 7], tf.int32), ValueError, "boundary"),
])
def test_bad_input_is_a_clear_error(model_files, inputs, error, message):
    with pytest.raises(error, match=message):
        ELMoEmbedding.from_files(*model_files)(inputs)


def test_bad_arguments_are_clear_errors(model_files, tmp_path):
    with pytest.raises(ValueError, match="lstm_outputs2"):
        ELMoEmbedding.from_files(*model_files, output="lstm_outputs3")
    one_layer = write_model(tmp_path, n_layers=1)
    with pytest.raises(ValueError, match="Received: output='lstm_outputs2'"):
        ELMoEmbedding.from_files(*one_layer[:2], output="lstm_outputs2")
    with pytest.raises(ValueError, match="input_type"):
        ELMoEmbedding.from_files(*model_files, input_type="text")
    with pytest.raises(TypeError, match="string tensor"):
        ELMoEmbedding.from_files(*model_files, input_type="tokens")(tf.constant([[1, 2]]))
    layer = ELMoEmbedding.from_files(*model_files, max_batch_size=2)
    with pytest.raises(ValueError, match="max_batch_size=2"):  # a known batch: at once
        layer(_tokens(SENTENCES))


# ELMoEmbedding hands `mix`, `mix_seed` and `l2_coef` to its WeightLayers; each mix's own math, weights and
# gradients are proven in tests/layers/test_weight_layers_mixes.py. Two mixes at opposite ends (nothing trained,
# a seeded draw; a per-token function with gamma and two L2 terms) show the forwarding, at a third of the cost.
@pytest.mark.slow
@pytest.mark.parametrize("mix, trainable", [("frozen", set()), ("attention", {"v", "b", "gamma"})])
def test_each_mix_is_weight_layers_on_the_lm_embeddings_and_trains_its_own_weights(model_files, tmp_path, mix,
                                                                                     trainable):
    seed = 4 if mix == "frozen" else None
    model, layer = _tagger(model_files, mix=mix, mix_seed=seed, l2_coef=0.01)
    assert {v.path.split("/")[-1] for v in layer.trainable_weights} == trainable
    assert layer.get_config()["mix"] == mix and layer.get_config()["mix_seed"] == seed
    before, bilm = _snapshot(layer.mix.weights), _snapshot(layer.network.weights)
    _fit_one_step(model)
    moved = [v.name for v, changed in zip(layer.mix.weights, _changed(before, layer.mix.weights)) if changed]
    assert set(moved) == trainable
    assert not any(_changed(bilm, layer.network.weights))
    every = ELMoEmbedding.from_config({**layer.get_config(), "output": "all"})
    every(_tokens(SENTENCES))
    every.set_weights(layer.get_weights())
    out = every(_tokens(SENTENCES))
    mask = out["mask"].numpy()
    word = out["word_emb"].numpy()
    lm_embeddings = np.stack([np.concatenate([word, word], axis=-1), out["lstm_outputs1"], out["lstm_outputs2"]], 1)
    reference = WeightLayers(mix=mix, seed=seed)
    reference(lm_embeddings, mask=mask)
    reference.set_weights(layer.mix.get_weights())
    expected = reference(lm_embeddings, mask=mask).numpy()
    np.testing.assert_allclose(out["elmo"].numpy()[mask], expected[mask], atol=1e-5)
    assert not out["elmo"].numpy()[~mask].any()  # padding stays zero, whatever the mix gives it
    out = {"elmo": layer(_tokens(SENTENCES))}
    # The config and a .keras archive carry the mix.
    clone = ELMoEmbedding.from_config(layer.get_config())
    clone(_tokens(SENTENCES))
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(clone(_tokens(SENTENCES)).numpy(), out["elmo"].numpy())
    path = str(tmp_path / f"{mix}.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    np.testing.assert_array_equal(reloaded(_tokens(SENTENCES)).numpy(), model(_tokens(SENTENCES)).numpy())



def test_from_files_builds_without_drawing_weights_the_file_then_sets(model_files, monkeypatch):
    # Random draws are most of an original-size build; from_files overwrites them all anyway.
    import bilm.models.elmo_embedding as module
    from bilm.models.functional_bilm import WEIGHTS_FOLLOW

    zero_builds = []

    def recording_build_bilm(*args, **kwargs):
        zero_builds.append(WEIGHTS_FOLLOW.is_on())
        return build_bilm(*args, **kwargs)

    build_bilm = module.build_bilm
    monkeypatch.setattr(module, "build_bilm", recording_build_bilm)
    loaded = ELMoEmbedding.from_files(*model_files, output="all")
    constructed = ELMoEmbedding(model_files[0], output="all")
    assert zero_builds == [True, False]
    kernels = [w for w in constructed.network.weights if "kernel" in w.name]
    assert kernels and all(np.any(w.numpy() != 0) for w in kernels)  # the constructor alone: random weights
    reference = BidirectionalLanguageModel(*model_files, stateful=False)
    assert len(loaded.network.weights) == len(reference.network.weights)
    for got, want in zip(loaded.network.weights, reference.network.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with WEIGHTS_FOLLOW.on():
        unset = build_bilm(constructed.options)
    # build_bilm's kernel_initializer: every table and kernel.
    kernels = [w for w in unset.weights if "kernel" in w.name or "embedding" in w.name]
    assert kernels and all(not np.any(w.numpy()) for w in kernels)
