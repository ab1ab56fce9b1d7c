"""The highway's inference products of few rows in columns on JAX and PyTorch (a kernel's transpose kept beside
it): the float64 values of the layer, for any number of rows, after its kernels change too."""
import pytest

from backend_processes import json_result, run_on_backend

HIGHWAY_IN_COLUMNS = '''
import json
import keras
import numpy as np
from bilm.layers.highway import Highway
from bilm.models.network_calls import inference_call
backend = keras.backend.backend()
if backend == "jax":
    from bilm.backend.jax.column_kernels import TRANSPOSES
else:
    import torch
    from bilm.backend.torch.layer_calls import TRANSPOSES
kept = TRANSPOSES.kept

rng = np.random.default_rng(0)
features = 96
inputs = keras.Input((None, features), name="x")
highway = Highway(2, name="highway")
network = keras.Model({"x": inputs}, highway(inputs))
call = inference_call(network)

def run(x):
    return call({"x": x})

def reference(x):
    x = x.astype(np.float64)
    for k in range(2):
        weights = [np.asarray(keras.ops.convert_to_numpy(w), np.float64) for w in (
            highway.carry_kernels[k], highway.carry_biases[k], highway.transform_kernels[k],
            highway.transform_biases[k])]
        gate = 1 / (1 + np.exp(-(x @ weights[0] + weights[1])))
        transform = np.maximum(x @ weights[2] + weights[3], 0)
        x = gate * transform + (1 - gate) * x
    return x

errors, kept_counts = [], []
for rows in (1, 3, 300):
    x = rng.normal(size=(1, rows, features)).astype(np.float32)
    errors.append(float(np.abs(keras.ops.convert_to_numpy(run(x)) - reference(x)).max()))
    kept_counts.append(len(kept))
# New kernel values: the next call reads them, not the transposes of the old ones.
for kernel in highway.column_kernels():
    kernel.assign(rng.normal(size=kernel.shape).astype(np.float32) / 10)
x = rng.normal(size=(1, 3, features)).astype(np.float32)
errors.append(float(np.abs(keras.ops.convert_to_numpy(run(x)) - reference(x)).max()))
# The transposes kept are what few rows read: made zero, they change 3 rows' values, not 300 rows'.
for key, entry in list(kept.items()):
    kept[key] = (*entry[:-1], entry[-1] * 0)
poisoned = {}
for rows in (3, 300):
    x = rng.normal(size=(1, rows, features)).astype(np.float32)
    poisoned[rows] = float(np.abs(keras.ops.convert_to_numpy(run(x)) - reference(x)).max())
trained = None
if backend == "torch":  # where a gradient is recorded, the rows' products (no transposes kept)
    kept.clear()
    highway(keras.ops.convert_to_tensor(x))
    trained = len(kept)
print(json.dumps({"errors": errors, "kept": kept_counts, "poisoned": poisoned, "trained": trained}))
'''


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_highway_of_few_rows_runs_in_columns_with_the_layers_values(backend):
    result = json_result(run_on_backend(backend, HIGHWAY_IN_COLUMNS))
    assert max(result["errors"]) < 1e-5, result
    # The four kernels' transposes are kept from the first call of few rows; 300 rows take the rows' products.
    assert result["kept"] == [4, 4, 4], result
    assert result["poisoned"]["3"] > 0.01 and result["poisoned"]["300"] < 1e-5, result
    assert result["trained"] in (None, 0), result
