"""max_pooled_char_convolutions: TF's gather, conv1d and max, with a sparse gradient."""
import functools

import numpy as np
import pytest
import tensorflow as tf

from bilm.ops.char_convolutions import (
    _compiled_maxima,
    columns_to_keep,
    direct_convolutions,
    max_pooled_char_convolutions,
)


def _reference(char_ids, embedding, kernels):
    embedded = tf.gather(embedding, char_ids)
    return tf.concat([tf.reduce_max(tf.nn.conv1d(embedded, k, stride=1, padding="VALID"), axis=1)
                      for k in kernels], axis=1)


def _char_ids(n_characters, max_chars, seed):
    """Words of random length framed as Batcher does, padded with one id;
    an all-zero row (batch padding); a row of one repeated char."""
    rng = np.random.default_rng(seed)
    ids = np.full((12, max_chars), n_characters - 1)
    for row in range(10):
        length = rng.integers(1, max_chars + 1)
        ids[row, :length] = rng.integers(1, n_characters - 1, size=length)
    ids[10] = 0
    ids[11] = 5
    return tf.constant(ids, tf.int32)


def _assert_matches_reference(char_ids, embedding, kernels, atol_scales=False, direct_up_to=0):
    """Outputs, and gradients of a loss through them, equal TF's conv1d and
    max; with `atol_scales`, to an absolute tolerance that grows with the
    largest value (sums of large terms round off in proportion)."""
    widths = [k.shape[0] for k in kernels]
    upstream = tf.random.stateless_normal([char_ids.shape[0], sum(k.shape[2] for k in kernels)], seed=[3, 0])
    results = []
    ours = functools.partial(max_pooled_char_convolutions, direct_up_to=direct_up_to)
    for op in (ours, _reference):
        with tf.GradientTape() as tape:
            tape.watch([embedding] + kernels)
            pooled = op(char_ids, embedding, kernels)
            loss = tf.reduce_sum(pooled * upstream) + tf.reduce_sum(pooled ** 2)
        gradients = tape.gradient(loss, [embedding] + kernels)
        results.append([pooled] + [tf.convert_to_tensor(g) for g in gradients])
    for name, ours, theirs in zip(["pooled", "d_embedding"] + [f"d_kernel_{w}" for w in widths], *results):
        scale = max(1.0, np.abs(theirs.numpy()).max()) if atol_scales else 1.0
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5 * scale, err_msg=name)
        assert np.abs(theirs.numpy()).max() > 0, name


# direct_up_to=100: these few tokens run as direct convolutions (inference's path).
@pytest.mark.parametrize("direct_up_to", [0, 100])
@pytest.mark.parametrize("n_characters, widths", [(262, (1, 3, 7)), (261, (2, 8, 9)), (1500, (4, 6, 7))])
def test_outputs_and_gradients_equal_tf_autodiff(n_characters, widths, direct_up_to):
    # Widths 8 and 9 pack a window's ids into two int64s (7 per pack at 9
    # bits); 1500 characters need 11 bits (5 per pack).
    max_chars, dim = 10, 4
    char_ids = _char_ids(n_characters, max_chars, seed=n_characters)
    embedding = tf.random.stateless_uniform([n_characters, dim], seed=[1, n_characters], minval=-1, maxval=1)
    kernels = [tf.random.stateless_normal([w, dim, 3 + w], seed=[2, w]) for w in widths]
    _assert_matches_reference(char_ids, embedding, kernels, direct_up_to=direct_up_to)
    # The padded rows tie across positions: TF splits the gradient between
    # the tied windows, the op gives it to one, and the two agree.
    convolution = tf.nn.conv1d(tf.gather(embedding, char_ids), kernels[0], stride=1, padding="VALID").numpy()
    ties = (convolution == convolution.max(axis=1, keepdims=True)).sum(axis=1)
    assert (ties > 1).any()


def test_training_and_prediction_character_counts_share_one_compiled_loop():
    # Training's char embedding has 261 rows and prediction's 262; a
    # training run measures its boundary state with the second.
    kernels = [tf.random.stateless_normal([w, 3, 2], seed=[4, w]) for w in (2, 5)]  # shapes of this test only
    traced = _compiled_maxima.experimental_get_tracing_count()
    for n_characters in (261, 262):
        char_ids = _char_ids(n_characters, 10, seed=1)
        embedding = tf.random.stateless_uniform([n_characters, 3], seed=[1, 1], minval=-1, maxval=1)
        _assert_matches_reference(char_ids, embedding, kernels)
    assert _compiled_maxima.experimental_get_tracing_count() - traced == 1


@pytest.mark.parametrize("direct_up_to", [0, 100])
def test_columns_past_the_longest_word_are_dropped_and_stood_in_for(direct_up_to):
    # Words of at most 14 ids in 40 columns: with widths up to 3, 16 columns
    # hold every window that reaches into a word; the rest lie in the
    # padding run. The padding char's embedding is large, so for many
    # filters the padding window is the maximum, and for the 14-id row
    # (width-3 windows kept at 0..13, all touching the word) only a dropped
    # window reaches it.
    n_characters, max_chars, dim, widths = 261, 40, 4, (1, 2, 3)
    rng = np.random.default_rng(0)
    ids = np.full((6, max_chars), n_characters - 1)
    for row, length in enumerate([3, 14, 1, 5, 2]):
        ids[row, :length] = rng.integers(0, n_characters - 1, size=length)
    ids[5] = 0  # a batch padding row: its run is of id 0
    ids[4, 1] = n_characters - 1  # the padding id inside a word is content
    char_ids = tf.constant(ids, tf.int32)
    assert int(columns_to_keep(char_ids, max(widths))) == 16
    embedding = tf.tensor_scatter_nd_update(
        tf.random.stateless_uniform([n_characters, dim], seed=[1, 2], minval=-1, maxval=1),
        [[n_characters - 1]], [[4.0, -3.0, 2.0, 5.0]])
    kernels = [tf.random.stateless_normal([w, dim, 6], seed=[2, w]) for w in widths]
    _assert_matches_reference(char_ids, embedding, kernels, atol_scales=True, direct_up_to=direct_up_to)
    convolution = tf.nn.conv1d(tf.gather(embedding, char_ids), kernels[2], stride=1, padding="VALID").numpy()
    kept = 16 - widths[2] + 1
    assert (convolution[1, kept:].max(axis=0) > convolution[1, :kept].max(axis=0)).any()


def test_direct_convolutions_run_only_up_to_their_token_count():
    # Past direct_up_to the compiled loop runs; below it the same sums without the loop: bit for bit
    # one result, so a token's encoding does not depend on how many tokens share the call.
    char_ids = _char_ids(262, 10, seed=4)
    embedding = tf.random.stateless_uniform([262, 4], seed=[1, 4], minval=-1, maxval=1)
    kernels = [tf.random.stateless_normal([w, 4, 5], seed=[2, w]) for w in (1, 3, 7)]
    loop = max_pooled_char_convolutions(char_ids, embedding, kernels).numpy()
    np.testing.assert_array_equal(
        max_pooled_char_convolutions(char_ids, embedding, kernels, direct_up_to=char_ids.shape[0] - 1).numpy(), loop)
    direct = max_pooled_char_convolutions(char_ids, embedding, kernels, direct_up_to=char_ids.shape[0]).numpy()
    np.testing.assert_array_equal(direct, loop)
    np.testing.assert_allclose(direct, _reference(char_ids, embedding, kernels).numpy(), rtol=1e-5, atol=1e-5)


def test_inside_direct_convolutions_any_count_runs_direct_and_no_compiled_loop_is_traced():
    char_ids = _char_ids(262, 10, seed=5)
    embedding = tf.random.stateless_uniform([262, 4], seed=[1, 5], minval=-1, maxval=1)
    kernels = [tf.random.stateless_normal([w, 4, 5], seed=[2, w]) for w in (1, 3, 7)]

    def functions_traced(direct_only):
        run = tf.function(lambda ids: max_pooled_char_convolutions(ids, embedding, kernels, direct_up_to=2),
                          autograph=False)
        if direct_only:
            with direct_convolutions():
                graph = run.get_concrete_function(tf.TensorSpec([None, 10], tf.int32)).graph
        else:
            graph = run.get_concrete_function(tf.TensorSpec([None, 10], tf.int32)).graph
        return " ".join(f.signature.name for f in graph.as_graph_def().library.function), run

    names, run = functions_traced(direct_only=False)
    assert "compiled_maxima" in names
    names, run = functions_traced(direct_only=True)
    assert "compiled_maxima" not in names
    # 12 tokens, past direct_up_to: still the direct path (the loop's sums, without the loop).
    loop = max_pooled_char_convolutions(char_ids, embedding, kernels).numpy()
    np.testing.assert_array_equal(run(char_ids).numpy(), loop)
    with direct_convolutions():
        np.testing.assert_array_equal(
            max_pooled_char_convolutions(char_ids, embedding, kernels, direct_up_to=2).numpy(), loop)
        # direct_up_to=0 (training's path) is not affected.
        np.testing.assert_array_equal(max_pooled_char_convolutions(char_ids, embedding, kernels).numpy(), loop)


def test_columns_to_keep_counts_the_longest_content_and_never_drops_a_window_it_needs():
    def keep(rows, max_width):
        return int(columns_to_keep(tf.constant(rows, tf.int32), max_width))
    pad = 260
    assert keep([[1, 2, pad] + [pad] * 37], 7) == 8  # content 2, + 6
    assert keep([[1] * 3 + [pad] * 37, [1] * 10 + [pad] * 30], 7) == 16  # 10 + 6
    assert keep([[1] * 39 + [2]], 7) == 40  # no run: everything
    assert keep([[3] * 40], 7) == 8  # one id throughout: all windows alike
    assert keep([[1] * 38 + [pad] * 2], 7) == 40  # capped at the row width
    assert keep([[pad] * 40], 3) == 8  # only padding: at least one window
    assert keep(np.zeros((0, 40)), 3) == 8


@pytest.mark.parametrize("direct_up_to", [0, 100])
def test_no_tokens_gives_an_empty_result_and_zero_gradients(direct_up_to):
    # (TensorFlow's oneDNN convolution gives an empty batch back as it came, (0, 10, 4), on AVX512 CPUs.)
    embedding = tf.random.stateless_normal([262, 4], seed=[0, 1])
    kernels = [tf.random.stateless_normal([2, 4, 3], seed=[0, 2]), tf.random.stateless_normal([3, 4, 5], seed=[0, 3])]
    with tf.GradientTape() as tape:
        tape.watch([embedding] + kernels)
        pooled = max_pooled_char_convolutions(tf.zeros([0, 10], tf.int32), embedding, kernels, direct_up_to)
        loss = tf.reduce_sum(pooled)
    assert pooled.shape == (0, 8)
    gradients = tape.gradient(loss, [embedding] + kernels, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    for gradient in gradients:
        assert not np.any(tf.convert_to_tensor(gradient).numpy())


@pytest.mark.parametrize("bad_id", [-1, 262])
def test_an_id_outside_the_embedding_is_a_clear_error(bad_id):
    # XLA's lookups would clamp it silently; the op checks first.
    embedding = tf.random.stateless_normal([262, 4], seed=[0, 1])
    kernels = [tf.random.stateless_normal([2, 4, 3], seed=[0, 2])]
    char_ids = np.full((2, 10), 5)
    char_ids[1, 3] = bad_id
    with pytest.raises(tf.errors.InvalidArgumentError, match="char ids must be"):
        max_pooled_char_convolutions(tf.constant(char_ids, tf.int32), embedding, kernels)


def test_a_char_cnn_too_large_for_int32_bins_is_a_clear_error():
    # 2**20 characters x (8 offsets x 256 filters) buckets = 2**31.
    embedding = tf.zeros([2 ** 20, 2])
    kernels = [tf.zeros([8, 2, 256])]
    with pytest.raises(ValueError, match="too large for int32"):
        max_pooled_char_convolutions(tf.zeros([1, 10], tf.int32), embedding, kernels)


def test_the_gradient_is_the_same_bit_for_bit_on_every_call():
    # Large enough for TensorFlow to split a scatter over threads (tf.math.bincount with weights, which
    # summed each thread's share in the order the threads ended, differed here from call to call).
    rng = np.random.default_rng(0)
    char_ids = tf.constant(rng.integers(1, 200, size=(2048, 16)), tf.int32)
    embedding = tf.constant(rng.standard_normal((261, 8)), tf.float32)
    kernels = [tf.constant(rng.standard_normal((width, 8, 256)), tf.float32) for width in (3, 7)]
    upstream = tf.constant(rng.standard_normal((2048, 512)), tf.float32)

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            tape.watch([embedding] + kernels)
            loss = tf.reduce_sum(max_pooled_char_convolutions(char_ids, embedding, kernels) * upstream)
        return tape.gradient(loss, [embedding] + kernels)

    first = [g.numpy() for g in gradients()]
    for _ in range(8):
        for expected, got in zip(first, gradients()):
            np.testing.assert_array_equal(got.numpy(), expected)
