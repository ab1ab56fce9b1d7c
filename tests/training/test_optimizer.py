"""SparseAdagrad, deduplicate and global_norm_scale against TF1's dense Adagrad and tf.clip_by_global_norm."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.training.optimizer import SparseAdagrad, deduplicate, global_norm_scale
from training_helpers import clip_by_global_norm, scale_gradient


def test_sparse_adagrad_and_clipping_match_dense_tf1_adagrad():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 3)).astype(np.float32)
    dense_grad = rng.normal(size=(4, 3)).astype(np.float32)
    indices = np.array([7, 2, 7, 40])  # a repeated row, as gathers produce
    values = rng.normal(size=(4, 3)).astype(np.float32)
    sparse = deduplicate(tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant([50, 3])))
    assert sorted(sparse.indices.numpy().tolist()) == [2, 7, 40]
    (clipped_sparse, clipped_dense), norm = clip_by_global_norm([sparse, tf.constant(dense_grad)], 1.5)
    dense_sparse = tf.convert_to_tensor(tf.IndexedSlices(tf.constant(values), tf.constant(indices), [50, 3]))
    reference, reference_norm = tf.clip_by_global_norm([dense_sparse, dense_grad], 1.5)
    assert isinstance(clipped_sparse, tf.IndexedSlices)
    np.testing.assert_allclose(float(norm), float(reference_norm), rtol=1e-6)
    np.testing.assert_allclose(tf.convert_to_tensor(clipped_sparse).numpy(), reference[0].numpy(), atol=1e-6)

    variables = {"table": tf.Variable(table), "dense": tf.Variable(np.ones((4, 3), np.float32))}
    optimizer = SparseAdagrad(variables, learning_rate=0.2, initial_accumulator_value=1.0)
    optimizer.apply(variables, {"table": clipped_sparse, "dense": clipped_dense})
    for name, grad, start in (("table", reference[0].numpy(), table), ("dense", reference[1].numpy(), 1.0)):
        accumulator = 1.0 + grad ** 2  # TF1 AdagradOptimizer, no epsilon
        np.testing.assert_allclose(optimizer.accumulators[name].numpy(), accumulator, rtol=1e-6)
        np.testing.assert_allclose(variables[name].numpy(), start - 0.2 * grad / np.sqrt(accumulator), atol=1e-6)
    untouched = np.setdiff1d(np.arange(50), indices)
    assert np.array_equal(variables["table"].numpy()[untouched], table[untouched])


@pytest.mark.parametrize("clip_norm", [100.0, 0.5])  # not clipping, clipping
def test_global_norm_scale_of_replica_sums_is_that_of_their_mean(clip_norm):
    rng = np.random.default_rng(2)
    sums = [tf.constant(rng.normal(size=(4, 3)), tf.float32),
            tf.IndexedSlices(tf.constant(rng.normal(size=(2, 3)), tf.float32), tf.constant([5, 1]), [9, 3])]
    scale, norm = global_norm_scale(sums, clip_norm, summed_over=4)
    means = [sums[0] / 4, tf.IndexedSlices(sums[1].values / 4, sums[1].indices, sums[1].dense_shape)]
    clipped, reference_norm = clip_by_global_norm(means, clip_norm)
    np.testing.assert_allclose(float(norm), float(reference_norm), rtol=1e-6)
    np.testing.assert_allclose((sums[0] * scale).numpy(), clipped[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose((sums[1].values * scale).numpy(), clipped[1].values.numpy(), rtol=1e-6)


def test_adagrad_gradient_scale_equals_scaled_gradients_and_zero_skips_non_finite_ones():
    rng = np.random.default_rng(1)
    table, dense = rng.normal(size=(9, 3)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    sparse = tf.IndexedSlices(tf.constant(rng.normal(size=(2, 3)), tf.float32), tf.constant([5, 1]), [9, 3])
    dense_grad = tf.constant(rng.normal(size=(4, 3)), tf.float32)

    def applied(gradients, gradient_scale):
        variables = {"table": tf.Variable(table), "dense": tf.Variable(dense)}
        optimizer = SparseAdagrad(variables, learning_rate=0.2)
        optimizer.apply(variables, gradients, gradient_scale=gradient_scale)
        return [v.numpy() for v in variables.values()] + [a.numpy() for a in optimizer.accumulators.values()]

    scale = tf.constant(0.37)
    inside = applied({"table": sparse, "dense": dense_grad}, scale)
    before = applied({"table": scale_gradient(sparse, scale), "dense": dense_grad * scale}, 1.0)
    unscaled = applied({"table": sparse, "dense": dense_grad}, 1.0)
    for a, b in zip(inside, before):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(inside[1], unscaled[1])

    nan = np.full((2, 3), np.nan, np.float32)
    skipped = applied({"table": tf.IndexedSlices(tf.constant(nan), sparse.indices, [9, 3]),
                       "dense": tf.constant(np.full((4, 3), np.inf, np.float32))}, tf.constant(0.0))
    for got, start in zip(skipped, [table, dense, np.ones((9, 3)), np.ones((4, 3))]):
        np.testing.assert_array_equal(got, start)
