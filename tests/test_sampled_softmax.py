"""The sampled and the full softmax losses, against NumPy and tf.nn.sampled_softmax_loss."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.sampled_softmax import full_softmax_loss, log_uniform_candidates, sampled_softmax_loss

V, DIM, N = 40, 6, 12


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=(V, DIM)).astype(np.float32)
    biases = rng.normal(size=(V,)).astype(np.float32)
    inputs = rng.normal(size=(N, DIM)).astype(np.float32)
    labels = rng.integers(0, V, size=N).astype(np.int32)
    return weights, biases, inputs, labels


def _numpy_full_loss(weights, biases, inputs, labels):
    logits = inputs.astype(np.float64) @ weights.T.astype(np.float64) + biases
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels]


def test_full_softmax_matches_numpy():
    weights, biases, inputs, labels = _problem()
    loss = full_softmax_loss(weights, biases, inputs, labels).numpy()
    np.testing.assert_allclose(loss, _numpy_full_loss(weights, biases, inputs, labels), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("expected_count", [1.0, 0.37])
def test_all_words_sampled_equals_full_softmax(expected_count):
    weights, biases, inputs, labels = _problem(1)
    # Every id sampled, in a shuffled order, with one expected count for all:
    # the correction is a constant and the true class is removed from the
    # sampled ones, so the sampled loss is the full softmax loss.
    sampled = np.random.default_rng(2).permutation(V).astype(np.int64)
    candidates = (sampled, np.full(N, expected_count, np.float32), np.full(V, expected_count, np.float32))
    loss = sampled_softmax_loss(weights, biases, inputs, labels, candidates).numpy()
    np.testing.assert_allclose(loss, _numpy_full_loss(weights, biases, inputs, labels), rtol=1e-5, atol=1e-5)


def test_all_words_sampled_by_the_log_uniform_sampler_is_close_to_full_softmax():
    weights, biases, inputs, labels = _problem(3)
    # Frequent ids (the labels here) are drawn with expected count ~1 when
    # all 40 ids must be drawn; rare ids get a count below 1, which only
    # raises their logits a little.
    labels = labels % 5
    candidates = log_uniform_candidates(tf.constant(labels), V, V, seed=7)
    assert sorted(candidates[0].numpy().tolist()) == list(range(V))
    loss = sampled_softmax_loss(weights, biases, inputs, labels, candidates).numpy()
    full = _numpy_full_loss(weights, biases, inputs, labels)
    assert np.abs(loss - full).max() < 0.1 * np.abs(full).mean() + 0.05


def test_matches_tf_nn_sampled_softmax_loss_with_accidental_hits():
    weights, biases, inputs, labels = _problem(4)
    labels[:4] = [0, 1, 2, 3]  # the most frequent ids: certainly sampled too
    candidates = log_uniform_candidates(tf.constant(labels), 10, V, seed=3)
    hits = np.isin(labels, candidates[0].numpy())
    assert hits.any()
    ours = sampled_softmax_loss(weights, biases, inputs, labels, candidates).numpy()
    reference = tf.nn.sampled_softmax_loss(
        weights, biases, labels[:, None].astype(np.int64), inputs, num_sampled=10, num_classes=V,
        sampled_values=(candidates[0], candidates[1][:, None], candidates[2]),
        remove_accidental_hits=True).numpy()
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_gradients_are_sparse_rows_of_the_table():
    weights_np, biases_np, inputs, labels = _problem(5)
    big_vocab = 100_000
    weights = tf.Variable(tf.random.normal([big_vocab, DIM]))
    biases = tf.Variable(tf.zeros([big_vocab]))
    candidates = log_uniform_candidates(tf.constant(labels), 16, big_vocab, seed=1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(sampled_softmax_loss(weights, biases, inputs, labels, candidates))
    grad_w, grad_b = tape.gradient(loss, [weights, biases])
    for grad in (grad_w, grad_b):
        assert isinstance(grad, tf.IndexedSlices)
        assert grad.values.shape[0] == N + 16
    assert grad_w.dense_shape.numpy().tolist() == [big_vocab, DIM]
    assert set(grad_w.indices.numpy().tolist()) == set(labels.tolist()) | set(candidates[0].numpy().tolist())


def test_sampler_is_log_uniform_and_distinct():
    labels = tf.zeros([3], tf.int32)
    draws = np.concatenate([log_uniform_candidates(labels, 1, 1000)[0].numpy() for _ in range(400)])
    # P(0) = log(2) / log(1001) ~ 0.10; P(id >= 500) ~ 0.10 in all.
    assert 0.05 < np.mean(draws == 0) < 0.16
    assert np.mean(draws >= 500) < 0.2
    sampled = log_uniform_candidates(labels, 300, 1000)[0].numpy()
    assert len(set(sampled.tolist())) == 300 and sampled.min() >= 0 and sampled.max() < 1000


def test_more_samples_than_words_is_a_clear_error():
    with pytest.raises(ValueError, match="n_negative_samples_batch"):
        log_uniform_candidates(tf.zeros([2], tf.int32), 50, 40)
