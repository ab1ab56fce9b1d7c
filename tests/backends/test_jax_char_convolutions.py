"""JAX's char CNN for a training step on a CPU (`bilm.backend.jax.char_convolutions`: each window a matrix product,
the max-pool's gradient to one window) gives the portable convolutions' values and gradient (JAX's own autodiff
of `portable_char_convolutions`), rows ending in a run of padding chars included, whose maxima tie; and for
inference on a CPU (the layer's call with `training=False`, of enough tokens) the table loop gives the portable
values, each token the same bytes alone as beside others."""
import numpy as np
import pytest

from backend_processes import json_result, run_on_backend

pytestmark = pytest.mark.slow  # JAX in a process of its own

CHECK = '''
import json
import jax, jax.numpy as jnp, numpy as np
from bilm.backend.jax.char_convolutions import window_product_char_convolutions
from bilm.ops.char_convolutions_portable import portable_char_convolutions

rng = np.random.default_rng(0)
filters = [(1, 8), (2, 8), (3, 16), (5, 16)]
ids = rng.integers(1, 261, size=(40, 12))
lengths = rng.integers(1, 8, size=40)
ids[np.arange(12)[None, :] >= lengths[:, None]] = 260  # each row ends in a run of one padding char
ids[-3:] = 0  # padding rows: every window ties
embedding = jnp.asarray(rng.uniform(-1, 1, (262, 4)).astype(np.float32))
kernels = [jnp.asarray(rng.normal(0, 0.5, (w, 4, n)).astype(np.float32)) for w, n in filters]
weights = jnp.asarray(rng.normal(size=(40, sum(n for _, n in filters))).astype(np.float32))

def loss(convolutions):
    return lambda e, k: jnp.sum(weights * jnp.tanh(convolutions(jnp.asarray(ids), e, k)))

out = {}
for name, convolutions in (("portable", portable_char_convolutions), ("products", window_product_char_convolutions)):
    value, (d_embedding, d_kernels) = jax.jit(jax.value_and_grad(loss(convolutions), argnums=(0, 1)))(
        embedding, kernels)
    out[name] = {"pooled": np.asarray(convolutions(jnp.asarray(ids), embedding, kernels)).tolist(),
                 "d_embedding": np.asarray(d_embedding).tolist(),
                 "d_kernels": [np.asarray(d).tolist() for d in d_kernels]}
from bilm.backend.jax.char_convolutions import table_loop_char_convolutions
from bilm.layers.char_cnn import CharCNNEncoder
layer = CharCNNEncoder(262, 4, filters, activation="tanh")
layer.build((None, None, 12))
for variable, value in zip([layer.char_embedding, *layer.kernels], [embedding, *kernels]):
    variable.assign(value)
table_loop = jax.jit(table_loop_char_convolutions)
pooled = np.asarray(table_loop(jnp.asarray(ids), embedding, kernels))
out["table_loop"] = pooled.tolist()
out["table_loop_alone_identical"] = all(
    np.asarray(table_loop(jnp.asarray(ids[i:i + 1]), embedding, kernels)).tobytes() == pooled[i].tobytes()
    for i in (0, 17, 39))
# The layer's call at inference runs it from TABLE_LOOP_ROWS tokens on: the bytes of its features by the table
# loop, not by the convolutions; below, by the convolutions, whose cost the tables would exceed.
from bilm.backend.jax.layer_calls import TABLE_LOOP_ROWS
out["layer_inference_identical"] = {}
for n in (TABLE_LOOP_ROWS, TABLE_LOOP_ROWS - 1):
    rows = jnp.asarray(np.resize(ids, (n, 12)))
    called = np.asarray(jax.jit(lambda ids: layer(ids, training=False))(rows[None]))[0]
    features = {name: np.asarray(jax.jit(lambda ids: layer.portable_features(ids, convolutions=convolutions))(rows))
                for name, convolutions in (("table_loop", table_loop_char_convolutions),
                                           ("convolutions", portable_char_convolutions))}
    out["layer_inference_identical"][n] = {name: called.tobytes() == value.tobytes()
                                           for name, value in features.items()}
print(json.dumps(out))
'''


def test_window_products_give_the_portable_values_and_gradient():
    report = json_result(run_on_backend("jax", CHECK))
    want, got = report["portable"], report["products"]
    np.testing.assert_allclose(got["pooled"], want["pooled"], rtol=1e-5, atol=1e-6)
    # Tied windows (the padding run) are identical: one of them takes what JAX's gradient shares among them.
    np.testing.assert_allclose(got["d_embedding"], want["d_embedding"], rtol=1e-4, atol=1e-5)
    assert np.abs(want["d_embedding"][260]).max() > 1e-2  # the padding char's row is reached through ties
    for got_kernel, want_kernel in zip(got["d_kernels"], want["d_kernels"], strict=True):
        np.testing.assert_allclose(got_kernel, want_kernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(report["table_loop"], want["pooled"], rtol=1e-5, atol=1e-6)
    assert report["table_loop_alone_identical"]
    assert list(report["layer_inference_identical"].values()) == [{"table_loop": True, "convolutions": False},
                                                                  {"table_loop": False, "convolutions": True}]
