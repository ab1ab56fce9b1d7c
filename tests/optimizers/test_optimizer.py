"""Each optimizer's update as the training step applies it (`bilm.training.arrays.optimizers.apply`, on the
backend's arrays) against independent references: TF1's Adagrad formula, Keras's Adam, lazy Adam in NumPy."""
import keras
import numpy as np
from keras import ops

from bilm.backend import training_ops
from bilm.training.arrays import optimizers


def _apply(name, learning_rate, parameters, state, dense, sparse, scale):
    """`apply` on tensors of NumPy arrays; `(parameters, state)` back as NumPy arrays."""
    tensors = lambda tree: keras.tree.map_structure(ops.convert_to_tensor, tree)  # noqa: E731
    sparse = {key: (ops.convert_to_tensor(np.asarray(rows, np.int32)), ops.convert_to_tensor(values))
              for key, (rows, values) in sparse.items()}
    got = optimizers.apply(training_ops(), name, learning_rate, tensors(parameters), tensors(state), tensors(dense),
                           sparse, ops.convert_to_tensor(np.float32(scale)))
    return keras.tree.map_structure(ops.convert_to_numpy, got)


def test_adagrad_updates_its_rows_as_tf1_adagrad_and_a_zero_scale_changes_nothing():
    rng = np.random.default_rng(0)
    parameters = {"table": rng.normal(size=(50, 3)).astype(np.float32), "dense": np.ones((4, 3), np.float32)}
    state = optimizers.initial_state("adagrad", parameters, np.asarray)
    rows = [7, 2, 40, 50]  # distinct; 50, the table's length, stands for no row
    values = rng.normal(size=(4, 3)).astype(np.float32)
    dense = rng.normal(size=(4, 3)).astype(np.float32)
    got, got_state = _apply("adagrad", 0.2, parameters, state, {"dense": dense}, {"table": (rows, values)}, 0.37)
    table_gradient = np.zeros((50, 3), np.float32)
    table_gradient[rows[:3]] = values[:3]
    for name, gradient in (("table", table_gradient), ("dense", dense)):
        gradient = gradient * np.float32(0.37)
        accumulator = 1.0 + gradient ** 2  # TF1's AdagradOptimizer: starts at 1.0, no epsilon
        np.testing.assert_allclose(got_state["accumulators"][name], accumulator, rtol=1e-6)
        np.testing.assert_allclose(got[name], parameters[name] - 0.2 * gradient / np.sqrt(accumulator), atol=1e-6)
    untouched = np.setdiff1d(np.arange(50), rows)
    np.testing.assert_array_equal(got["table"][untouched], parameters["table"][untouched])
    np.testing.assert_array_equal(got_state["accumulators"]["table"][untouched], 1.0)

    nan = np.full((4, 3), np.nan, np.float32)
    skipped, skipped_state = _apply("adagrad", 0.2, parameters, state, {"dense": nan}, {"table": (rows, nan)}, 0.0)
    for name in parameters:
        np.testing.assert_array_equal(skipped[name], parameters[name])
        np.testing.assert_array_equal(skipped_state["accumulators"][name], 1.0)


def test_dense_adam_steps_equal_keras_adam():
    rng = np.random.default_rng(3)
    parameters = {"w": rng.normal(size=(5, 4)).astype(np.float32)}
    state = optimizers.initial_state("adam", parameters, np.asarray)
    reference = keras.Variable(parameters["w"])
    keras_adam = keras.optimizers.Adam(learning_rate=0.01, epsilon=1e-7)
    for _ in range(4):
        gradient = rng.normal(size=(5, 4)).astype(np.float32)
        parameters, state = _apply("adam", 0.01, parameters, state, {"w": gradient}, {}, 1.0)
        keras_adam.apply_gradients([(ops.convert_to_tensor(gradient), reference)])
    np.testing.assert_allclose(parameters["w"], ops.convert_to_numpy(reference), rtol=1e-5, atol=1e-6)
    assert int(state["iterations"]) == 4


def test_sparse_adam_updates_only_its_rows_lazily_and_a_zero_scale_changes_nothing():
    rng = np.random.default_rng(4)
    table = rng.normal(size=(10, 3)).astype(np.float32)
    parameters = {"table": table}
    state = optimizers.initial_state("adam", parameters, np.asarray)
    m, v, w = np.zeros((10, 3)), np.zeros((10, 3)), table.astype(np.float64)
    t = 0
    for rows, scale in (([1, 4], 1.0), ([4, 7], 0.5), ([2], 0.0), ([1], 1.0)):
        values = rng.normal(size=(len(rows), 3)).astype(np.float32)
        if scale == 0.0:
            values[:] = np.nan  # a skipped step: non-finite gradients
        new_parameters, new_state = _apply("adam", 0.1, parameters, state, {}, {"table": (rows, values)}, scale)
        if scale == 0.0:
            np.testing.assert_array_equal(new_parameters["table"], parameters["table"])
            for slot in ("m", "v"):
                np.testing.assert_array_equal(new_state[slot]["table"], state[slot]["table"])
            assert int(new_state["iterations"]) == int(state["iterations"])
        else:
            t += 1
            g = values * scale
            m[rows] = 0.9 * m[rows] + 0.1 * g
            v[rows] = 0.999 * v[rows] + 0.001 * g ** 2
            w[rows] -= 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m[rows] / (np.sqrt(v[rows]) + 1e-7)
            np.testing.assert_allclose(new_parameters["table"], w, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(new_state["m"]["table"], m, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(new_state["v"]["table"], v, rtol=1e-5, atol=1e-9)
        parameters, state = new_parameters, new_state
    assert int(state["iterations"]) == t == 3
    untouched = [0, 3, 5, 6, 8, 9]
    np.testing.assert_array_equal(parameters["table"][untouched], table[untouched])
