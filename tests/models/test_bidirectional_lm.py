"""BidirectionalLanguageModel against the independent NumPy oracle."""
import numpy as np
import pytest

import numpy_reference as R
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.ops.lowbit_matmul import streams_float32
from bilm.text.batching import Batcher
from helpers import SENTENCES, graph_op_types, write_model

CONFIGS = {
    "relu_2layers_skip": dict(),
    "tanh_no_highway": dict(activation="tanh", n_highway=0),
    "two_highway_no_skip": dict(n_highway=2, use_skip_connections=False),
    "no_cnn_projection": dict(filters=((1, 2), (2, 4)), projection_dim=6),
    "no_lstm_projection_no_clip": dict(lstm_dim=6, projection_dim=6, cell_clip=None, proj_clip=None),
    "one_layer": dict(n_layers=1),
    "training_n_characters_261": dict(n_characters=261),
}


def _char_ids(sentences, max_chars=7):
    return Batcher(None, max_chars).batch_sentences(sentences)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_forward_matches_numpy_reference(tmp_path, config):
    options_file, weight_file, options = write_model(tmp_path, **CONFIGS[config])
    ids = _char_ids(SENTENCES)
    np.testing.assert_array_equal(ids, R.char_ids(SENTENCES, 7))
    ref = R.bilm_forward(R.read_weights(weight_file), options, ids)
    # Without the token cache every batch is encoded in the graph; compare that path too.
    uncached = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, stateful=False,
                                          token_cache_size=0)
    assert uncached.token_cache is None
    uncached_out = uncached(ids)
    for key in ("lm_embeddings", "token_embeddings"):
        assert np.abs(uncached_out[key].numpy() - ref[key]).max() < 1e-5, key
    model = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, stateful=False)
    out = {k: v.numpy() for k, v in model(ids).items()}

    n_layers = options["lstm"]["n_layers"]
    p = options["lstm"]["projection_dim"]
    assert out["lm_embeddings"].shape == (len(SENTENCES), n_layers + 1, ids.shape[1] - 2, 2 * p)
    np.testing.assert_array_equal(out["lengths"], ref["lengths"])
    np.testing.assert_array_equal(out["mask"], ref["mask"])
    for layer in range(n_layers + 1):
        diff = np.abs(out["lm_embeddings"][:, layer] - ref["lm_embeddings"][:, layer]).max()
        assert diff < 1e-5, f"layer {layer}: max abs difference {diff}"
    assert np.abs(out["token_embeddings"] - ref["token_embeddings"]).max() < 1e-5
    # The reference is not trivial: values beyond the mask are zero, inside they are not.
    assert np.all(out["lm_embeddings"][~np.broadcast_to(
        out["mask"][:, None, :, None], out["lm_embeddings"].shape)] == 0)
    assert np.abs(out["lm_embeddings"][0]).max() > 0.1


@pytest.mark.parametrize("token_cache_size", [50_000, 3, 0])
def test_state_carries_across_batches_of_different_sizes(tmp_path, token_cache_size):
    options_file, weight_file, options = write_model(tmp_path)
    batches = [_char_ids(SENTENCES), _char_ids(SENTENCES[1:3]), _char_ids(SENTENCES[::-1][:4])]
    model = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=6,
                                       token_cache_size=token_cache_size)
    ref_outputs, ref_buffers = R.run_stateful(R.read_weights(weight_file), options, batches, 6)
    for batch, ref in zip(batches, ref_outputs):
        out = model(batch)
        assert np.abs(out["lm_embeddings"].numpy() - ref["lm_embeddings"]).max() < 1e-5
    for (d, layer), (c, h) in ref_buffers.items():
        name = f"{('forward', 'backward')[d]}_{layer}"
        assert np.abs(model.state_buffers[f"{name}_c"].numpy() - c).max() < 1e-5
        assert np.abs(model.state_buffers[f"{name}_h"].numpy() - h).max() < 1e-5


def test_smaller_batch_leaves_other_rows_untouched(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=6)
    model(_char_ids(SENTENCES))
    before = {k: v.numpy().copy() for k, v in model.state_buffers.items()}
    model(_char_ids(SENTENCES[:2]))
    for key, buffer in model.state_buffers.items():
        after = buffer.numpy()
        np.testing.assert_array_equal(after[2:], before[key][2:])
        assert not np.array_equal(after[:2], before[key][:2]), key


def test_stateless_and_reset_give_the_first_batch_result(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    ids = _char_ids(SENTENCES)
    stateful = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8)
    first = stateful(ids)["lm_embeddings"].numpy()
    second = stateful(ids)["lm_embeddings"].numpy()
    assert np.abs(first - second).max() > 1e-4  # state was carried
    stateful.reset_states()
    np.testing.assert_allclose(stateful(ids)["lm_embeddings"].numpy(), first, atol=1e-6)
    stateless = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, stateful=False)
    for _ in range(2):
        np.testing.assert_allclose(stateless(ids)["lm_embeddings"].numpy(), first, atol=1e-6)


def test_each_call_starts_from_the_current_start_state(tmp_path):
    """The start states a call converts once and keeps must follow `set_start` and a call's own `start`."""
    options_file, weight_file, _ = write_model(tmp_path)
    ids = _char_ids(SENTENCES)
    model = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, stateful=False, start="zeros")
    zeros = model(ids)["lm_embeddings"].numpy()
    rng = np.random.default_rng(0)
    boundary = {key: rng.normal(size=size).astype(np.float32) for key, _, size in model.state_keys}
    model.set_start("warm", boundary_state=boundary)
    warm = model(ids)["lm_embeddings"].numpy()
    assert np.abs(warm - zeros).max() > 1e-3
    np.testing.assert_allclose(model(ids, start="zeros")["lm_embeddings"].numpy(), zeros, atol=1e-6)
    np.testing.assert_allclose(model(ids)["lm_embeddings"].numpy(), warm, atol=1e-6)
    fresh = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, stateful=False,
                                       boundary_state=boundary)
    np.testing.assert_allclose(fresh(ids)["lm_embeddings"].numpy(), warm, atol=1e-6)
    model.set_start("zeros")
    np.testing.assert_allclose(model(ids)["lm_embeddings"].numpy(), zeros, atol=1e-6)


def test_model_has_no_trainable_variables(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file)
    assert model.trainable_variables == ()
    assert len(model.network.weights) > 0 and model.network.trainable_weights == []


def test_one_sentence_a_call_matches_the_reference_on_a_trace_of_its_own(tmp_path):
    # One row a call is traced apart (its LSTMs know their one row, which low-bit kernels use).
    options_file, weight_file, options = write_model(tmp_path)
    weights = R.read_weights(weight_file)
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False)
    for sentence in SENTENCES:
        ids = _char_ids([sentence])
        ref = R.bilm_forward(weights, options, ids)["lm_embeddings"]
        np.testing.assert_allclose(model(ids)["lm_embeddings"].numpy(), ref, rtol=0, atol=1e-5)
    one_row = model.calls._one_row_cached_calls[False].get_concrete_function().graph
    # Float32 kernels run bilm's recurrence at any row count where it is built (AVX2 and FMA), one row or many.
    many_rows = model.calls._cached_calls[False].get_concrete_function().graph
    assert ("StatelessWhile" in graph_op_types(one_row)) != streams_float32()
    assert ("StatelessWhile" in graph_op_types(many_rows)) != streams_float32()


def test_padding_rows_do_not_change_other_rows(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False)
    alone = model(_char_ids(SENTENCES[:1]))["lm_embeddings"].numpy()
    together = model(_char_ids(SENTENCES))["lm_embeddings"].numpy()
    np.testing.assert_allclose(together[:1, :, :4], alone, rtol=1e-5, atol=1e-6)  # float32 round-off


def test_empty_inputs_give_empty_results(tmp_path):
    options_file, weight_file, options = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False)
    out = model(_char_ids([]))
    assert out["lm_embeddings"].shape == (0, 3, 0, 12)
    out = model(_char_ids([[], []]))
    assert out["lm_embeddings"].shape == (2, 3, 0, 12)
    np.testing.assert_array_equal(out["lengths"].numpy(), [0, 0])


@pytest.mark.parametrize("bad, message", [
    (np.zeros((9, 4, 7), np.int32), "max_batch_size"),
    (np.zeros((2, 4, 5), np.int32), "shape"),
    (np.zeros((2, 4), np.int32), "shape"),
    (np.zeros((2, 1, 7), np.int32), "boundary"),
    (np.full((2, 4, 7), 300, np.int32), "ids must lie in"),
    (np.zeros((2, 4, 7), np.float32), "integers"),
])
def test_bad_ids_give_clear_errors(tmp_path, bad, message):
    options_file, weight_file, _ = write_model(tmp_path)
    model = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8)
    with pytest.raises((ValueError, TypeError), match=message):
        model(bad)
