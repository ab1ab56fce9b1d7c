"""A row of `batch_invariant_matmul` is the same bytes however many rows share the call."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.ops.batch_invariant import INVARIANT_COLUMNS, batch_invariant_matmul
from bilm.options import BiLMOptions
from bilm.presets import get_preset

ROW_COUNTS = (1, 2, 3, 7, 64, 104, 128, 300)


def product_shapes(preset):
    """The `(inner, outer)` shape of every float32 product of a model of `preset` at inference."""
    options = BiLMOptions.from_dict(get_preset(preset))
    filters = sum(num for _, num in options.char_cnn.filters)
    dim, projection = options.lstm_dim, options.projection_dim
    return {"highway": (filters, filters), "token projection": (filters, projection),
            "LSTM input": (projection, 4 * dim), "LSTM recurrence": (projection, 4 * dim),
            "cell projection": (dim, projection)}


SHAPES = sorted({shape for preset in ("small", "medium", "original") for shape in product_shapes(preset).values()})


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{n}x{m}" for n, m in SHAPES])
def test_every_row_is_the_same_whatever_the_number_of_rows_at_every_published_size(shape):
    n, m = shape
    rng = np.random.default_rng(n + m)
    x = rng.standard_normal((max(ROW_COUNTS), n)).astype(np.float32)
    kernel = tf.constant((rng.standard_normal((n, m)) / np.sqrt(n)).astype(np.float32))
    call = tf.function(batch_invariant_matmul)  # as the layers run it: in a graph
    full = call(tf.constant(x), kernel).numpy()
    for rows in ROW_COUNTS:
        got = call(tf.constant(x[:rows]), kernel).numpy()
        assert got.shape == (rows, m)
        assert np.array_equal(got, full[:rows]), f"{rows} rows of {n}x{m}"
        assert np.array_equal(batch_invariant_matmul(tf.constant(x[:rows]), kernel).numpy(), got)
    # A row's place among the others does not matter either.
    shuffled = rng.permutation(64)
    assert np.array_equal(call(tf.constant(x[shuffled]), kernel).numpy(), full[shuffled])


def test_it_is_the_product_and_takes_no_rows_and_unknown_row_counts():
    rng = np.random.default_rng(0)
    kernel = tf.constant(rng.standard_normal((INVARIANT_COLUMNS + 8, 2 * INVARIANT_COLUMNS + 16)).astype(np.float32))
    x = rng.standard_normal((5, INVARIANT_COLUMNS + 8)).astype(np.float32)
    np.testing.assert_allclose(batch_invariant_matmul(x, kernel).numpy(), x @ kernel.numpy(), rtol=2e-5, atol=2e-4)
    assert batch_invariant_matmul(tf.zeros([0, INVARIANT_COLUMNS + 8]), kernel).shape == (0, kernel.shape[1])
    traced = tf.function(batch_invariant_matmul, input_signature=[
        tf.TensorSpec([None, kernel.shape[0]], tf.float32), tf.TensorSpec(kernel.shape, tf.float32)])
    assert np.array_equal(traced(x[:1], kernel).numpy(), batch_invariant_matmul(x, kernel).numpy()[:1])
