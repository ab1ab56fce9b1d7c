"""The sampled and full softmax on JAX (bilm.backend.jax.sampler, bilm.training.model.softmax_losses) against
TensorFlow's
(bilm.ops.sampled_softmax, tf.nn.sampled_softmax_loss, tf.random.log_uniform_candidate_sampler) and NumPy."""
import contextlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

from bilm.backend import fast_layer_call
from bilm.backend.jax.random import seed_words
from bilm.backend.jax.sampler import DRAW_BLOCK, log_uniform_candidates, log_uniform_draws
from bilm.errors import UserError
from bilm.ops import sampled_softmax as tf_softmax
from bilm.training.model.softmax_losses import full_softmax_loss, sampled_softmax_loss, sampled_softmax_loss_from_rows
from bilm.utils.backend import PORTABLE

V, DIM, N, S = 1000, 16, 24, 50

candidates_jit = jax.jit(log_uniform_candidates, static_argnames=("num_sampled", "n_vocab", "return_tries"))


def _problem(seed, n_vocab=V):
    rng = np.random.default_rng(seed)
    weights = (rng.normal(size=(n_vocab, DIM)) / 2).astype(np.float32)
    biases = rng.normal(size=(n_vocab,)).astype(np.float32)
    inputs = rng.normal(size=(N, DIM)).astype(np.float32)
    labels = rng.integers(0, n_vocab, size=N).astype(np.int32)
    return weights, biases, inputs, labels


def _tf_candidates(labels, seed):
    """TensorFlow's negatives for `labels`, as NumPy (a pure function of the seed: the labels change only
    their expected counts)."""
    candidates = tf_softmax.log_uniform_candidates(tf.constant(labels), S, V, tf.constant([seed, 17], tf.int64))
    return tuple(c.numpy() for c in candidates)


def _problem_with_hits(seed, dominant_hits):
    """`(weights, biases, inputs, labels, candidates)` where rows 0-4 have a sampled id as label (row 5 the same
    one as row 0): accidental hits."""
    weights, biases, inputs, labels = _problem(seed)
    sampled = _tf_candidates(labels, seed)[0]
    labels[:5] = sampled[:5]
    labels[5] = sampled[0]
    if dominant_hits:
        # Rows that predict their (sampled) label with near certainty: the removed hit holds nearly all of
        # the row's sampled exponentials.
        weights[sampled[:4]] = inputs[:4] = 5.0 * np.eye(4, DIM)
    candidates = _tf_candidates(labels, seed)
    np.testing.assert_array_equal(candidates[0], sampled)
    assert np.isin(labels, sampled).sum() >= 6
    return weights, biases, inputs, labels, candidates


def _tf_loss_and_gradients(loss_fn, weights, biases, inputs, labels, candidates, dtype=tf.float32, **kwargs):
    """`[loss, d_weights, d_biases, d_inputs]` as NumPy: the loss per row and the gradients of its mean."""
    variables = [tf.Variable(tf.cast(x, dtype)) for x in (weights, biases, inputs)]
    with tf.GradientTape() as tape:
        counts = tuple(tf.cast(c, dtype) for c in candidates[1:])
        loss = loss_fn(*[v.read_value() for v in variables], labels, (tf.constant(candidates[0]),) + counts, **kwargs)
        mean = tf.reduce_mean(loss)
    return [loss.numpy()] + [tf.convert_to_tensor(g).numpy() for g in tape.gradient(mean, variables)]


def _tf_nn_loss(weights, biases, inputs, labels, candidates):
    sampled, true_expected, sampled_expected = candidates
    return tf.nn.sampled_softmax_loss(
        weights, biases, labels[:, None].astype(np.int64), inputs, num_sampled=len(sampled), num_classes=V,
        sampled_values=(tf.cast(sampled, tf.int64), true_expected[:, None], sampled_expected),
        remove_accidental_hits=True)


def _gradients(loss_fn, *arrays, portable=True):
    """`(loss_fn(*arrays), its mean's gradients)` as NumPy: the `keras.ops` losses on the tests' backend
    (TensorFlow; `portable` false: TensorFlow's own call where it has one), differentiated by a tape (each
    backend's step differentiates them its own way, compared with TensorFlow's step in test_jax_train_step.py)."""
    variables = [tf.Variable(a) for a in arrays]
    with tf.GradientTape() as tape, (PORTABLE.on() if portable else contextlib.nullcontext()):
        loss = loss_fn(*[v.read_value() for v in variables])
        mean = tf.reduce_mean(loss)
    return [np.asarray(loss)] + [tf.convert_to_tensor(g).numpy() for g in tape.gradient(mean, variables)]


def _our_loss_and_gradients(weights, biases, inputs, labels, candidates, matmul_dtype="float32"):
    return _gradients(lambda w, b, x: sampled_softmax_loss(w, b, x, labels, candidates, matmul_dtype),
                      weights, biases, inputs)


NAMES = ["loss", "d_weights", "d_biases", "d_inputs"]


@pytest.mark.parametrize("dominant_hits", [False, True])
def test_loss_and_gradients_equal_tensorflows_with_accidental_hits(dominant_hits):
    weights, biases, inputs, labels, candidates = _problem_with_hits(4, dominant_hits)
    ours = _our_loss_and_gradients(weights, biases, inputs, labels, candidates)
    bilm_tf = _tf_loss_and_gradients(tf_softmax.sampled_softmax_loss, weights, biases, inputs, labels, candidates)
    # tf.nn's loss in float64, so that its own round-off does not count against ours.
    tf_nn = _tf_loss_and_gradients(_tf_nn_loss, weights, biases, inputs, labels, candidates, tf.float64)
    for name, got, want, want64 in zip(NAMES, ours, bilm_tf, tf_nn):
        assert got.shape == want.shape, name
        assert np.abs(want).max() > 0, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(got, want64, rtol=1e-5, atol=1e-6, err_msg=name)
    # The table's gradient is zero outside the labels' and the sampled rows.
    untouched = np.setdiff1d(np.arange(V), np.concatenate([labels, candidates[0]]))
    assert not np.any(ours[1][untouched]) and not np.any(ours[2][untouched])


def test_bfloat16_matmul_is_close_to_float32():
    weights, biases, inputs, labels, candidates = _problem_with_hits(5, False)
    float32 = _tf_loss_and_gradients(tf_softmax.sampled_softmax_loss, weights, biases, inputs, labels, candidates)
    ours = _our_loss_and_gradients(weights, biases, inputs, labels, candidates, "bfloat16")
    ours_float32 = _our_loss_and_gradients(weights, biases, inputs, labels, candidates)
    for name, got, want in zip(NAMES, ours, float32):
        np.testing.assert_allclose(got, want, rtol=0.02, atol=0.02 * np.abs(want).max(), err_msg=name)
    assert not np.array_equal(ours[0], ours_float32[0])


def test_gathered_rows_give_the_same_loss_and_the_tables_gradient_row_by_row():
    weights, biases, inputs, labels, candidates = _problem_with_hits(6, False)
    ids = np.concatenate([labels, candidates[0]])
    rows, row_biases = weights[ids], biases[ids]
    corrected = row_biases - np.log(np.concatenate([candidates[1], candidates[2]]))
    full = _our_loss_and_gradients(weights, biases, inputs, labels, candidates)

    def given(rows, row_biases):
        return sampled_softmax_loss(rows, row_biases, inputs, labels, candidates, rows_given=True)

    def from_rows(rows, corrected):
        return sampled_softmax_loss_from_rows(inputs, rows, corrected, labels, candidates[0])

    # TensorFlow's own loss from the rows (its gradient by hand, which its array step takes) gives the same.
    assert fast_layer_call("sampled_softmax_from_rows") is not None
    fast = _gradients(from_rows, rows, corrected, portable=False)
    for got, want in zip(fast, _gradients(from_rows, rows, corrected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    for loss_fn, biases_in in ((given, row_biases), (from_rows, corrected)):
        loss, d_rows, d_biases = _gradients(loss_fn, rows, biases_in)
        np.testing.assert_allclose(loss.mean(), full[0].mean(), rtol=1e-6)
        assert d_rows.shape == (N + S, DIM) and d_biases.shape == (N + S,)
        # Scattered back (repeated ids add up), the rows' gradients are the table's.
        table, table_biases = np.zeros_like(weights), np.zeros_like(biases)
        np.add.at(table, ids, d_rows)
        np.add.at(table_biases, ids, d_biases)
        np.testing.assert_allclose(table, full[1], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(table_biases, full[2], rtol=1e-6, atol=1e-7)
    with pytest.raises(UserError, match="rows_given"):
        sampled_softmax_loss(weights, biases, inputs, labels, candidates, rows_given=True)
    with pytest.raises(UserError, match="matmul_dtype"):
        sampled_softmax_loss(weights, biases, inputs, labels, candidates, "float16")


def test_full_softmax_equals_numpy_log_softmax():
    weights, biases, inputs, labels = _problem(8)
    logits = inputs.astype(np.float64) @ weights.T.astype(np.float64) + biases
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    want = -log_probs[np.arange(N), labels]
    np.testing.assert_allclose(full_softmax_loss(weights, biases, inputs, labels), want, rtol=1e-5, atol=1e-5)


def _float64_counts(ids, tries, num_sampled, n_vocab):
    """The expected counts, float64, in NumPy."""
    p = np.log((np.asarray(ids, np.float64) + 2.0) / (np.asarray(ids, np.float64) + 1.0)) / np.log(n_vocab + 1.0)
    return p * tries if tries == num_sampled else -np.expm1(tries * np.log1p(-p))


@pytest.mark.slow
@pytest.mark.parametrize("num_sampled, n_vocab", [(1, 50), (S, V), (V, V), (16000, 20000)])
def test_sampler_draws_distinct_ids_deterministically_with_float64_counts(num_sampled, n_vocab):
    labels = jnp.array([0, 5, n_vocab - 1])
    key = seed_words(num_sampled, 0)
    sampled, true_counts, sampled_counts, tries = candidates_jit(labels, num_sampled, n_vocab, key,
                                                                 return_tries=True)
    sampled, tries = np.asarray(sampled), int(tries)
    assert sampled.dtype == np.int32 and sampled.shape == (num_sampled,)
    assert true_counts.dtype == sampled_counts.dtype == np.float32
    assert len(set(sampled.tolist())) == num_sampled and sampled.min() >= 0 and sampled.max() < n_vocab
    if num_sampled == 1:
        assert tries == 1  # the counts' p * tries branch
    if num_sampled >= V:
        assert tries > DRAW_BLOCK  # the sampling went on past the first block
    if num_sampled == n_vocab:
        assert sorted(sampled.tolist()) == list(range(n_vocab))
    # The counts (float32 arithmetic) against the float64 formula from the same number of draws: within
    # 5e-7 relative, as documented.
    np.testing.assert_allclose(true_counts, _float64_counts(labels, tries, num_sampled, n_vocab), rtol=1e-6)
    np.testing.assert_allclose(sampled_counts, _float64_counts(sampled, tries, num_sampled, n_vocab), rtol=1e-6)
    # A pure function of the seed, compiled or not (not compiled, once: it takes a second to trace); another
    # seed draws other ids.
    again = (log_uniform_candidates if num_sampled == n_vocab else candidates_jit)(
        labels, num_sampled, n_vocab, key, return_tries=True)
    for got, want in zip(again, (sampled, true_counts, sampled_counts, tries)):
        np.testing.assert_array_equal(got, want)
    if num_sampled < n_vocab:
        other = candidates_jit(labels, num_sampled, n_vocab, seed_words(num_sampled + 1, 0), return_tries=True)[0]
        assert not np.array_equal(other, sampled)


@pytest.mark.slow
def test_sampler_with_x64_draws_the_same_ids_and_float64_counts():
    labels = jnp.array([0, 5, V - 1])
    key = seed_words(3, 0)
    sampled, _, _, tries = candidates_jit(labels, S, V, key, return_tries=True)
    with jax.enable_x64(True):  # within this test only: the module never turns it on
        sampled64, true64, counts64, tries64 = candidates_jit(labels, S, V, key, return_tries=True)
    np.testing.assert_array_equal(sampled64, sampled)
    assert int(tries64) == int(tries)
    np.testing.assert_allclose(true64, _float64_counts(labels, int(tries), S, V), rtol=1e-7)
    np.testing.assert_allclose(counts64, _float64_counts(sampled, int(tries), S, V), rtol=1e-7)


def test_more_samples_than_words_is_a_clear_error():
    with pytest.raises(UserError, match="n_negative_samples_batch"):
        log_uniform_candidates(jnp.zeros([2], jnp.int32), 50, 40, seed_words(0, 0))


def _probabilities(n_vocab):
    ids = np.arange(n_vocab, dtype=np.float64)
    return np.log((ids + 2.0) / (ids + 1.0)) / np.log(n_vocab + 1.0)


def test_draws_follow_the_log_uniform_law():
    draws = jax.jit(log_uniform_draws, static_argnums=(1, 2))
    ids = np.asarray(draws(seed_words(0, 0), 1 << 20, V))
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < V
    n = len(ids)
    # Each of the 20 most frequent ids, and the rest in 20 slices, within 5 standard deviations.
    counts = np.bincount(ids, minlength=V)
    p = _probabilities(V)
    edges = np.concatenate([np.arange(21), np.linspace(21, V, 20).astype(int)])
    got = np.add.reduceat(counts, edges[:-1])
    want = np.add.reduceat(p, edges[:-1]) * n
    assert np.all(np.abs(got - want) < 5 * np.sqrt(want) + 1), (got, want)


def test_rare_ids_of_a_large_vocabulary_come_up_at_their_rate():
    # An 800k vocabulary: the float32 inverse of the distribution function, floor(exp(u log(V + 1))) - 1,
    # never draws about 45k of the ids above 500k. Here (TensorFlow's float64 inverse, as a search of its
    # thresholds in 32-bit integers) each id comes up at its own rate: the ids drawn at least once among
    # [500k, 800k) are as many as the law makes them.
    n_vocab = 800_000
    ids = np.asarray(jax.jit(log_uniform_draws, static_argnums=(1, 2))(seed_words(1, 0), 1 << 22, n_vocab))
    rare = np.unique(ids[ids >= 500_000])
    p = _probabilities(n_vocab)[500_000:]
    expected = np.sum(-np.expm1(len(ids) * np.log1p(-p)))
    assert abs(len(rare) - expected) < 5 * math.sqrt(expected), (len(rare), expected)
    # The octaves' masses.
    octave = np.floor(np.log2(ids + 1.0)).astype(int)
    edges = 2.0 ** np.arange(21)
    want = np.log(np.minimum(edges[1:], n_vocab + 1) / edges[:-1]) / np.log(n_vocab + 1.0) * len(ids)
    assert np.all(np.abs(np.bincount(octave, minlength=20) - want) < 5 * np.sqrt(want))


def test_unique_sampler_includes_ids_as_tensorflows_sampler_does():
    # Over many seeds, how often each frequent id is among the 50 sampled: JAX's sampler, the mean of its own
    # expected counts (the inclusion probability given the draws it took) and TensorFlow's stateful sampler
    # (tf.random.log_uniform_candidate_sampler, another implementation of the same law).
    n_keys, labels, ids = 200, jnp.array([0, 5, V - 1]), np.arange(40)
    ours, estimated, theirs = [], [], []
    for i in range(n_keys):
        sampled, _, _, tries = candidates_jit(labels, S, V, seed_words(1000 + i, 0), return_tries=True)
        ours.append(np.isin(ids, np.asarray(sampled)))
        estimated.append(_float64_counts(ids, int(tries), S, V))
        theirs.append(np.isin(ids, tf.random.log_uniform_candidate_sampler(
            tf.zeros([1, 1], tf.int64), 1, S, True, V, seed=i)[0].numpy()))
    ours, estimated, theirs = np.array(ours), np.array(estimated), np.array(theirs)
    # Id by id (frequent ids are nearly always in: P(0) = 0.10 per draw, some 70 draws; id 39 about half
    # the time), and the number of these 40 ids in a sample (about 25, give or take 2).
    inclusion = ours.mean(axis=0)
    assert inclusion[0] > 0.99 and 0.2 < inclusion[39] < 0.8
    sigma = np.sqrt(np.maximum(inclusion * (1 - inclusion), 0.01) / n_keys)
    assert np.all(np.abs(inclusion - estimated.mean(axis=0)) < 4 * sigma + 0.01), (inclusion, estimated.mean(0))
    assert np.all(np.abs(inclusion - theirs.mean(axis=0)) < 4 * np.sqrt(2) * sigma + 0.01), (inclusion,
                                                                                             theirs.mean(0))
    sigma = np.std(ours.sum(axis=1)) / np.sqrt(n_keys)
    assert abs(ours.sum(axis=1).mean() - estimated.sum(axis=1).mean()) < 4 * sigma
    assert abs(ours.sum(axis=1).mean() - theirs.sum(axis=1).mean()) < 4 * np.sqrt(2) * sigma


@pytest.mark.parametrize("n_vocab", [1, 2, 7, V, 20_000, 793_471])
def test_draws_are_tensorflows_from_the_same_seed(n_vocab):
    # TensorFlow's float64 inversion and this search of its thresholds, on TensorFlow's Philox stream: the
    # same ids, draw for draw, whatever the vocabulary's size (793,471: the 1B Word Benchmark's).
    draws = jax.jit(log_uniform_draws, static_argnums=(1, 2))
    for seed in ((5, -9), (2 ** 40 + 3, 77)):
        want = tf_softmax.log_uniform_draws(tf.constant(seed, tf.int64), 2 * DRAW_BLOCK, n_vocab).numpy()
        np.testing.assert_array_equal(np.asarray(draws(seed_words(*seed), 2 * DRAW_BLOCK, n_vocab)), want)


@pytest.mark.parametrize("num_sampled, n_vocab", [(S, V), (V, V), (8192, 793_471)])
def test_negatives_are_tensorflows_from_the_same_seed(num_sampled, n_vocab):
    # The same ids in the same order, and the same counts up to float32 arithmetic (TensorFlow's in float64).
    labels = np.array([0, 5, n_vocab - 1], np.int32)
    want = tf_softmax.log_uniform_candidates(tf.constant(labels), num_sampled, n_vocab, tf.constant([4, -2], tf.int64))
    got = candidates_jit(jnp.asarray(labels), num_sampled, n_vocab, seed_words(4, -2))
    np.testing.assert_array_equal(np.asarray(got[0]), want[0].numpy())
    for counts, expected in zip(got[1:], want[1:]):
        np.testing.assert_allclose(np.asarray(counts), expected.numpy(), rtol=5e-7)
