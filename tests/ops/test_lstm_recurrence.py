"""lstm_recurrence_xla equals the graph recurrence lstm_recurrence, padded time, empty rows and batches included."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.projected_lstm import ProjectedLSTM


@pytest.mark.parametrize("go_backwards, projection", [(False, 4), (True, 4), (False, None)])
def test_xla_recurrence_equals_the_graph_recurrence(go_backwards, projection):
    # Time 5 is padded to 8 inside; an empty row keeps its initial state.
    x = tf.random.stateless_normal([4, 5, 6], seed=[5, 6])
    lengths = tf.constant([5, 2, 0, 4])
    output_dim = projection or 8
    state = [tf.random.stateless_normal([4, 8], seed=[7, 8]),
             tf.random.stateless_normal([4, output_dim], seed=[9, 1])]
    results, weights = [], None
    for jit_compile in (False, True):
        layer = ProjectedLSTM(8, projection, 0.5, 0.3, go_backwards=go_backwards, jit_compile=jit_compile)
        layer.build(x.shape)
        if weights is None:  # large enough that both clips act
            weights = [np.random.default_rng(0).normal(size=w.shape).astype(np.float32) for w in layer.weights]
        layer.set_weights(weights)
        assert layer.uses_xla is jit_compile
        results.append(layer(x, lengths, state))
    for a, b in zip(*results):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6)
    np.testing.assert_array_equal(results[1][1].numpy()[2], state[0].numpy()[2])
    assert results[1][0].shape == (4, 5, output_dim)
    for empty in (x[:0], x[:, :0]):  # no rows, no steps
        n = empty.shape[0]
        out, c, h = layer(empty, tf.zeros([n], tf.int32), [s[:n] for s in state])
        assert out.shape == tuple(empty.shape[:2]) + (output_dim,)
        np.testing.assert_array_equal(c.numpy(), state[0].numpy()[:n])
