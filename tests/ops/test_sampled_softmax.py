"""The sampled and the full softmax losses, against NumPy and tf.nn.sampled_softmax_loss."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.ops.sampled_softmax import DRAW_BLOCK, full_softmax_loss, log_uniform_candidates, sampled_softmax_loss
from tensorflow_reference.training_lm import SAMPLER_SITE

V, DIM, N = 40, 6, 12


def _seed(i):
    return tf.constant([i, 17], tf.int64)


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
    candidates = log_uniform_candidates(tf.constant(labels), V, V, _seed(7))
    assert sorted(candidates[0].numpy().tolist()) == list(range(V))
    loss = sampled_softmax_loss(weights, biases, inputs, labels, candidates).numpy()
    full = _numpy_full_loss(weights, biases, inputs, labels)
    assert np.abs(loss - full).max() < 0.1 * np.abs(full).mean() + 0.05


@pytest.mark.parametrize("dominant_hits, true_count_scale", [(False, 1.0), (True, 1.0), (False, 0.5), (True, 3.0)])
def test_loss_and_gradients_match_tf_nn_sampled_softmax_loss_with_accidental_hits(dominant_hits, true_count_scale):
    weights, biases, inputs, labels = _problem(4)
    labels[:4] = [0, 1, 2, 3]  # the most frequent ids: certainly sampled too
    labels[4] = 0  # two rows hit the same sampled id
    if dominant_hits:
        # Rows that predict their (sampled) label with near certainty: the
        # removed hit holds nearly all of the row's sampled exponentials.
        weights[:4] = inputs[:4] = 5.0 * np.eye(4, DIM)
    sampled, true_expected, sampled_expected = log_uniform_candidates(tf.constant(labels), 10, V, _seed(3))
    # A true count other than the sampled count of the same id makes the
    # true logit differ from its removed hit's by log(true_count_scale).
    candidates = (sampled, true_expected * true_count_scale, sampled_expected)
    hits = np.isin(labels, sampled.numpy())
    assert hits.sum() >= 5
    if dominant_hits:
        logits = inputs[:4] @ weights[sampled.numpy()].T + biases[sampled.numpy()]
        assert np.all(sampled.numpy()[logits.argmax(axis=1)] == labels[:4])
        assert np.all(logits.max(axis=1) > np.sort(logits, axis=1)[:, -2] + 10)
    upstream = tf.random.stateless_normal([N], seed=[4, 4])
    results = []
    # The reference is tf.nn's loss in float64, so that its own round-off
    # does not count against ours.
    for loss_fn, dtype in ((sampled_softmax_loss, tf.float32), (_tf_nn_loss, tf.float64)):
        variables = [tf.Variable(tf.cast(x, dtype)) for x in (weights, biases, inputs)]
        with tf.GradientTape() as tape:
            counts = tuple(tf.cast(c, dtype) for c in candidates[1:])
            loss = loss_fn(*[v.read_value() for v in variables], labels, (sampled,) + counts)
            total = tf.reduce_sum(loss * tf.cast(upstream, dtype))
        results.append([loss] + [tf.convert_to_tensor(g) for g in tape.gradient(total, variables)])
    for name, ours, reference in zip(["loss", "d_weights", "d_biases", "d_inputs"], *results):
        np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
        assert np.abs(reference.numpy()).max() > 0, name


def _tf_nn_loss(weights, biases, inputs, labels, candidates):
    return tf.nn.sampled_softmax_loss(
        weights, biases, labels[:, None].astype(np.int64), inputs, num_sampled=len(candidates[0]),
        num_classes=V, sampled_values=(candidates[0], candidates[1][:, None], candidates[2]),
        remove_accidental_hits=True)


def test_gradients_are_sparse_rows_of_the_table():
    weights_np, biases_np, inputs, labels = _problem(5)
    big_vocab = 100_000
    weights = tf.Variable(tf.random.normal([big_vocab, DIM]))
    biases = tf.Variable(tf.zeros([big_vocab]))
    candidates = log_uniform_candidates(tf.constant(labels), 16, big_vocab, _seed(1))
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
    draw = tf.function(lambda seed: log_uniform_candidates(labels, 1, 1000, seed)[0])  # one trace, 400 calls
    draws = np.concatenate([draw(_seed(i)).numpy() for i in range(400)])
    # P(0) = log(2) / log(1001) ~ 0.10; P(id >= 500) ~ 0.10 in all.
    assert 0.05 < np.mean(draws == 0) < 0.16
    assert np.mean(draws >= 500) < 0.2
    sampled = log_uniform_candidates(labels, 300, 1000, _seed(0))[0].numpy()
    assert len(set(sampled.tolist())) == 300 and sampled.min() >= 0 and sampled.max() < 1000


def _numpy_unique_sampler(seed, num_sampled, n_vocab, labels):
    """The unique log-uniform sampler written out draw by draw, on the
    documented stream: draw i is uniform i % DRAW_BLOCK of the block
    fold_in(seed, i // DRAW_BLOCK), mapped to floor(exp(u log(V + 1))) - 1."""
    sampled, seen, tries, block = [], set(), 0, 0
    while len(sampled) < num_sampled:
        u = tf.random.stateless_uniform(
            [DRAW_BLOCK], seed=tf.random.experimental.stateless_fold_in(seed, block), dtype=tf.float64).numpy()
        for value in u:
            tries += 1
            word = min(int(np.floor(np.exp(value * np.log(n_vocab + 1.0)))) - 1, n_vocab - 1)
            if word not in seen:
                seen.add(word)
                sampled.append(word)
                if len(sampled) == num_sampled:
                    break
        block += 1

    def counts(ids):
        p = np.log((ids + 2.0) / (ids + 1.0)) / np.log(n_vocab + 1.0)
        return p * tries if tries == num_sampled else 1.0 - (1.0 - p) ** tries

    return np.array(sampled), counts(np.asarray(labels, np.float64)), counts(np.array(sampled, np.float64)), tries


@pytest.mark.parametrize("num_sampled, n_vocab", [(1, 50), (300, 1000), (1000, 1000), (2000, 800_000)])
def test_sampler_equals_a_draw_by_draw_reference(num_sampled, n_vocab):
    labels = np.array([0, 5, n_vocab - 1])
    seed = _seed(num_sampled)
    sampled, true_counts, sampled_counts = log_uniform_candidates(labels, num_sampled, n_vocab, seed)
    ref_sampled, ref_true, ref_counts, tries = _numpy_unique_sampler(seed, num_sampled, n_vocab, labels)
    if num_sampled == n_vocab:
        assert tries > DRAW_BLOCK  # the sampling went on past the first block
    np.testing.assert_array_equal(sampled.numpy(), ref_sampled)
    np.testing.assert_allclose(true_counts.numpy(), ref_true, rtol=1e-5)
    np.testing.assert_allclose(sampled_counts.numpy(), ref_counts, rtol=1e-5)


def test_sampler_is_a_pure_function_of_its_seed_and_compiles():
    labels = tf.constant([1, 2, 3])
    sample = tf.function(lambda seed: log_uniform_candidates(labels, 200, 5000, seed))
    first, again = sample(_seed(4)), sample(_seed(4))
    other = sample(_seed(5))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(first[0].numpy(), other[0].numpy())
    np.testing.assert_array_equal(first[0].numpy(), log_uniform_candidates(labels, 200, 5000, _seed(4))[0].numpy())


def test_sampler_needs_as_many_draws_as_tensorflows_sampler():
    # The number of draws that unique sampling takes is implied by the
    # expected counts: -expm1(n log1p(-p)). Ours and TensorFlow's stateful
    # sampler must agree on average (10 runs each, 8192 of 10k words: about
    # 80k draws, a few hundred apart between runs).
    n_vocab, num_sampled = 10_000, 8192
    labels = tf.zeros([1], tf.int64)

    def implied_draws(sampled, counts):
        p = np.log((sampled + 2.0) / (sampled + 1.0)) / np.log(n_vocab + 1.0)
        # Ids whose float32 count is neither 1.0 nor too coarse to invert.
        usable = (counts > 0.05) & (counts < 0.95)
        return np.median(np.log1p(-counts[usable].astype(np.float64)) / np.log1p(-p[usable]))

    ours = [implied_draws(s.numpy(), c.numpy()) for s, _, c in
            (log_uniform_candidates(labels, num_sampled, n_vocab, _seed(i)) for i in range(10))]
    theirs = [implied_draws(s.numpy(), c.numpy()) for s, _, c in
              (tf.random.log_uniform_candidate_sampler(labels[:, None], 1, num_sampled, True, n_vocab, seed=i)
               for i in range(10))]
    assert abs(np.mean(ours) - np.mean(theirs)) < 0.02 * np.mean(theirs)


def test_more_samples_than_words_is_a_clear_error():
    with pytest.raises(ValueError, match="n_negative_samples_batch"):
        log_uniform_candidates(tf.zeros([2], tf.int32), 50, 40, _seed(0))


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


def test_negatives_of_consecutive_steps_overlap_as_independent_draws_do():
    # The training step's seed is fold_in((seed, step), replica), then fold_in(SAMPLER_SITE + direction).
    labels, n_vocab, num_sampled = tf.zeros([4], tf.int32), 5000, 200

    @tf.function  # one trace: 170 draws op by op took 4 s
    def draw(step, direction):
        seed = tf.random.experimental.stateless_fold_in(tf.stack([tf.constant(3, tf.int64), step]), 0)
        seed = tf.random.experimental.stateless_fold_in(seed, SAMPLER_SITE + direction)
        return log_uniform_candidates(labels, num_sampled, n_vocab, seed)[0]

    def negatives(step, direction=0):
        return draw(tf.constant(step, tf.int64), tf.constant(direction, tf.int32)).numpy()

    draws = [negatives(step) for step in range(120)]
    inclusion = np.bincount(np.concatenate(draws), minlength=n_vocab) / len(draws)
    independent = np.sum(inclusion ** 2)  # the expected overlap of two independent draws
    consecutive = [len(np.intersect1d(a, b)) for a, b in zip(draws, draws[1:])]
    directions = [len(np.intersect1d(negatives(step, 0), negatives(step, 1))) for step in range(30)]
    for overlaps in (consecutive, directions):
        standard_error = np.std(overlaps) / np.sqrt(len(overlaps))
        assert abs(np.mean(overlaps) - independent) < 4 * standard_error + 1.0, (np.mean(overlaps), independent)


@pytest.mark.parametrize("num_sampled, n_vocab", [(300, 1000), (1000, 1000)])
def test_the_sampler_compiled_with_xla_draws_the_same_negatives(num_sampled, n_vocab):
    # Under XLA the sampler runs with fixed shapes and bilm.ops.stateless_random's draws; (1000, 1000)
    # takes more than one block of draws.
    labels = tf.constant([0, 5, n_vocab - 1])

    def sample(seed):
        return log_uniform_candidates(labels, num_sampled, n_vocab, seed)

    compiled = tf.function(sample, jit_compile=True, autograph=False)
    for seed in (_seed(num_sampled), tf.constant([-7, 2 ** 33], tf.int64)):
        for got, want in zip(compiled(seed), sample(seed)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
