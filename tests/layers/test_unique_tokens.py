"""UniqueTokens and GatherTokens: each distinct char-id row once, and its features gathered back."""
import json

import numpy as np
import pytest

from backend_processes import json_result, run_on_backend
from bilm.layers.unique_tokens import GatherTokens, UniqueTokens
from layer_testing import run_layer_test

# Two batches of char ids (max_chars 3) sharing rows, within and between them.
A = np.array([[[1, 2, 3], [4, 5, 6], [1, 2, 3]], [[0, 0, 0], [4, 5, 6], [7, 8, 9]]], np.int32)
B = np.array([[[7, 8, 9], [1, 2, 3]]], np.int32)


def test_unique_tokens_contract():
    run_layer_test(UniqueTokens, {}, [A, B], expected_output_shape=((1, None, 3), [(2, 3), (1, 2)]),
                   expected_output_dtype="int32")


def test_gather_tokens_contract():
    features = np.random.default_rng(0).normal(size=(1, 5, 4)).astype(np.float32)
    index = np.array([[0, 4, 4], [2, 1, 0]], np.int32)
    out = run_layer_test(GatherTokens, {}, {"unique_features": features, "index": index},
                         expected_output_shape=(2, 3, 4), expected_output_dtype="float32")
    np.testing.assert_array_equal(out.numpy(), features[0][index])


def test_each_row_of_every_input_is_its_unique_row():
    unique, (index_a, index_b) = UniqueTokens()([A, B])
    unique = unique.numpy()
    rows = {tuple(row) for row in np.concatenate([A.reshape(-1, 3), B.reshape(-1, 3)])}
    assert unique.shape == (1, len(rows), 3) and {tuple(row) for row in unique[0]} == rows
    np.testing.assert_array_equal(unique[0][index_a.numpy()], A)
    np.testing.assert_array_equal(unique[0][index_b.numpy()], B)


def test_gathering_encoded_unique_rows_equals_encoding_every_row():
    def encode(ids):  # any per-row function of the char ids
        return np.stack([ids.sum(-1), ids.max(-1) * 2.0], axis=-1).astype(np.float32)

    unique, indices = UniqueTokens()([A, B])
    features = encode(unique.numpy())
    for ids, index in zip((A, B), indices):
        np.testing.assert_array_equal(GatherTokens()(features, index).numpy(), encode(ids))



ON_TORCH = """
import json, sys
import numpy as np
import torch
from bilm.layers.unique_tokens import UniqueTokens

a, b = (np.asarray(x, np.int32) for x in json.loads(sys.argv[1]))
unique, (index_a, index_b) = UniqueTokens()([torch.as_tensor(a), torch.as_tensor(b)])
unique = unique.numpy()
print(json.dumps({"rows": unique.shape[1], "a": bool(np.array_equal(unique[0][index_a.numpy()], a)),
                  "b": bool(np.array_equal(unique[0][index_b.numpy()], b)), "dtype": str(index_a.dtype)}))
"""


@pytest.mark.slow  # over 3 s on two busy cores
def test_pytorch_encodes_each_distinct_row_once():
    result = json_result(run_on_backend("torch", ON_TORCH, json.dumps([A.tolist(), B.tolist()])))
    rows = {tuple(row) for row in np.concatenate([A.reshape(-1, 3), B.reshape(-1, 3)])}
    assert result == {"rows": len(rows), "a": True, "b": True, "dtype": "torch.int32"}


ON_JAX = """
import json, sys
import jax, jax.numpy as jnp
import numpy as np
from bilm.backend.jax.layer_calls import distinct_tokens_at_most, distinct_tokens_bound
from bilm.layers.unique_tokens import UniqueTokens

a, b = (np.asarray(x, np.int32) for x in json.loads(sys.argv[1]))
bound = distinct_tokens_bound([a, b], jax.devices("cpu")[:1])
layer = UniqueTokens()

def traced(a, b, bound):
    with distinct_tokens_at_most(bound):
        return layer([a, b])

result = {"bound": bound}
for name, n in (("bounded", bound), ("unbounded", None)):  # the bound: (rows, columns)
    unique, (index_a, index_b) = jax.jit(traced, static_argnums=2)(jnp.asarray(a), jnp.asarray(b), n)
    unique = np.asarray(unique)
    result[name] = {"rows": unique.shape[1], "a": bool(np.array_equal(unique[0][np.asarray(index_a)], a)),
                    "b": bool(np.array_equal(unique[0][np.asarray(index_b)], b))}
print(json.dumps(result))
"""


@pytest.mark.slow  # JAX in a process of its own
def test_jax_encodes_each_distinct_row_once_in_a_function_traced_for_their_bound():
    """Under `jax.jit`, whose shapes cannot depend on the ids, the distinct rows come padded to a bound counted
    beforehand (a training step's on one CPU); without one every row stands for itself."""
    result = json_result(run_on_backend("jax", ON_JAX, json.dumps([A.tolist(), B.tolist()])))
    rows = {tuple(row) for row in np.concatenate([A.reshape(-1, 3), B.reshape(-1, 3)])}
    # 4 distinct rows, padded to JAX's smallest count (here also every row's); every column.
    assert len(rows) == 4 and result["bound"] == [8, None]
    assert result["bounded"] == {"rows": 8, "a": True, "b": True}
    assert result["unbounded"] == {"rows": A.shape[0] * A.shape[1] + B.shape[0] * B.shape[1], "a": True, "b": True}
