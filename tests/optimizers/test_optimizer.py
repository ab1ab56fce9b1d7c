"""SparseAdagrad, SparseAdam, deduplicate and global_norm_scale against TF1's dense Adagrad, Keras's Adam,
a NumPy lazy Adam and tf.clip_by_global_norm."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from bilm.optimizers import deduplicate, global_norm_scale
from bilm.optimizers.adagrad import SparseAdagrad
from bilm.optimizers.adam import SparseAdam
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


def test_dense_adam_steps_equal_keras_adam():
    rng = np.random.default_rng(3)
    start = rng.normal(size=(5, 4)).astype(np.float32)
    gradients = [rng.normal(size=(5, 4)).astype(np.float32) for _ in range(4)]
    ours = {"w": tf.Variable(start)}
    optimizer = SparseAdam(ours, learning_rate=0.01)
    reference = keras.Variable(start)
    keras_adam = keras.optimizers.Adam(learning_rate=0.01, epsilon=1e-7)
    for gradient in gradients:
        optimizer.apply(ours, {"w": tf.constant(gradient)})
        keras_adam.apply_gradients([(tf.constant(gradient), reference)])
    np.testing.assert_allclose(ours["w"].numpy(), reference.numpy(), rtol=1e-5, atol=1e-6)
    assert int(optimizer.iterations.numpy()) == 4


def test_sparse_adam_updates_only_its_rows_lazily_and_a_zero_scale_changes_nothing():
    rng = np.random.default_rng(4)
    table = rng.normal(size=(10, 3)).astype(np.float32)
    variables = {"table": tf.Variable(table)}
    optimizer = SparseAdam(variables, learning_rate=0.1)
    m, v, w = np.zeros((10, 3)), np.zeros((10, 3)), table.astype(np.float64)
    t = 0
    for rows, scale in (([1, 4], 1.0), ([4, 7], 0.5), ([2], 0.0), ([1], 1.0)):
        values = rng.normal(size=(len(rows), 3)).astype(np.float32)
        if scale == 0.0:
            values[:] = np.nan  # a skipped step: non-finite gradients
        gradient = tf.IndexedSlices(tf.constant(values), tf.constant(rows), [10, 3])
        before = [x.numpy().copy() for x in optimizer.accumulators.values()] + [variables["table"].numpy().copy()]
        optimizer.apply(variables, {"table": gradient}, gradient_scale=tf.constant(scale))
        if scale == 0.0:
            after = [x.numpy() for x in optimizer.accumulators.values()] + [variables["table"].numpy()]
            for a, b in zip(before, after):
                np.testing.assert_array_equal(a, b)
            continue
        t += 1
        g = values * scale
        m[rows] = 0.9 * m[rows] + 0.1 * g
        v[rows] = 0.999 * v[rows] + 0.001 * g ** 2
        w[rows] -= 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m[rows] / (np.sqrt(v[rows]) + 1e-7)
        np.testing.assert_allclose(variables["table"].numpy(), w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(optimizer.accumulators["table/m"].numpy(), m, rtol=1e-5, atol=1e-7)
    assert int(optimizer.iterations.numpy()) == t == 3
    untouched = [0, 3, 5, 6, 8, 9]
    np.testing.assert_array_equal(variables["table"].numpy()[untouched], table[untouched])


@pytest.mark.parametrize("optimizer_class", [SparseAdagrad, SparseAdam])
def test_under_xla_deduplicated_rows_keep_their_number_and_the_updates_are_the_same(optimizer_class):
    # Under XLA `deduplicate` cannot drop rows: the repeated ones become zeros at an index past the end, which
    # XLA's scatters skip. Two steps, compiled and not, leave the same variables and slots.
    rng = np.random.default_rng(5)
    table, dense = rng.normal(size=(9, 3)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    indices = tf.constant([7, 2, 7, 8, 2, 7])
    steps = [(rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32))
             for _ in range(2)]

    def trained(compiled):
        variables = {"table": tf.Variable(table), "dense": tf.Variable(dense)}
        optimizer = optimizer_class(variables, learning_rate=0.1)

        def step(values, dense_gradient):
            sparse = deduplicate(tf.IndexedSlices(values, indices, tf.constant([9, 3])))
            gradients = [sparse, dense_gradient]
            scale, _ = global_norm_scale(gradients, 1.0)
            optimizer.apply(variables, dict(zip(variables, gradients)), gradient_scale=scale)
            return sparse.indices, sparse.values

        step = tf.function(step, jit_compile=compiled or None, autograph=False)
        rows = [step(*map(tf.constant, gradients)) for gradients in steps]
        return rows[0], [x.numpy() for x in (*variables.values(), *optimizer.accumulators.values())]

    (compiled_indices, compiled_values), compiled_state = trained(True)
    (plain_indices, plain_values), state = trained(False)
    assert compiled_indices.numpy().tolist() == [2, 7, 8, 9, 9, 9]
    ascending = np.argsort(plain_indices.numpy())
    np.testing.assert_allclose(compiled_values.numpy()[:3], plain_values.numpy()[ascending], atol=1e-6)
    np.testing.assert_array_equal(compiled_values.numpy()[3:], 0.0)
    for got, want in zip(compiled_state, state):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
