"""Dense updates: the compiled pass (large variables) equals the plain ops (small ones)."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.optimizers import dense_update
from bilm.optimizers.adagrad import SparseAdagrad, _dense_adagrad_values
from bilm.optimizers.adam import SparseAdam, _dense_adam_values


@pytest.mark.parametrize("optimizer_class, values", [(SparseAdagrad, _dense_adagrad_values),
                                                     (SparseAdam, _dense_adam_values)])
def test_compiled_and_plain_dense_updates_agree_and_a_zero_scale_skips_non_finite_gradients(
        optimizer_class, values, monkeypatch):
    rng = np.random.default_rng(5)
    start = rng.normal(size=(37, 11)).astype(np.float32)
    gradients = [rng.normal(size=start.shape).astype(np.float32) for _ in range(3)]
    gradients.append(np.full(start.shape, np.nan, np.float32))
    scales = [1.0, 0.5, 1.0, 0.0]
    results = {}
    for compiled_from in (1, start.size + 1):  # compiled; plain ops
        monkeypatch.setattr(dense_update, "COMPILED_MIN_ELEMENTS", compiled_from)
        traces = values.compiled.experimental_get_tracing_count()
        variables = {"w": tf.Variable(start)}
        optimizer = optimizer_class(variables, learning_rate=0.1)
        for gradient, scale in zip(gradients, scales):
            optimizer.apply(variables, {"w": tf.constant(gradient)}, gradient_scale=tf.constant(scale))
        assert (values.compiled.experimental_get_tracing_count() > traces) == (compiled_from == 1)
        results[compiled_from] = [variables["w"].numpy()] + [slot.numpy() for slot in optimizer.slots("w")]
    compiled, plain = results.values()
    assert not np.allclose(plain[0], start)
    for got, expected in zip(compiled, plain):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
