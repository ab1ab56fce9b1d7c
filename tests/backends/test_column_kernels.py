"""The highway's inference products: of few rows in columns on JAX (a kernel's transpose kept beside it), by
bilm's native product on PyTorch: the float64 values of the layer, for any number of rows, after its kernels change
too."""
from backend_processes import json_result, run_on_backend

# A two-layer highway of 96 features, its inference call (`run`) and its values in float64 NumPy (`reference`).
HIGHWAY = '''
import json
import keras
import numpy as np
from bilm.layers.highway import Highway
from bilm.models.network_calls import inference_call

rng = np.random.default_rng(0)
features = 96
inputs = keras.Input((None, features), name="x")
highway = Highway(2, name="highway")
call = inference_call(keras.Model({"x": inputs}, highway(inputs)))


def run(x):
    return call({"x": x})


def reference(x):
    x = x.astype(np.float64)
    for k in range(2):
        weights = [np.asarray(keras.ops.convert_to_numpy(w), np.float64) for w in (
            highway.carry_kernels[k], highway.carry_biases[k], highway.transform_kernels[k],
            highway.transform_biases[k])]
        gate = 1 / (1 + np.exp(-(x @ weights[0] + weights[1])))
        x = gate * np.maximum(x @ weights[2] + weights[3], 0) + (1 - gate) * x
    return x


def error(rows):
    x = rng.normal(size=(1, rows, features)).astype(np.float32)
    return float(np.abs(keras.ops.convert_to_numpy(run(x)) - reference(x)).max())


def new_kernels():
    for kernel in highway.column_kernels():
        kernel.assign(rng.normal(size=kernel.shape).astype(np.float32) / 10)
'''

HIGHWAY_IN_COLUMNS = HIGHWAY + '''
from bilm.backend.jax.column_kernels import TRANSPOSES
kept = TRANSPOSES.kept

errors, kept_counts = [], []
for rows in (1, 3, 300):
    errors.append(error(rows))
    kept_counts.append(len(kept))
new_kernels()  # the next call reads them, not the transposes of the old ones
errors.append(error(3))
# The transposes kept are what few rows read: made zero, they change 3 rows' values, not 300 rows'.
for key, entry in list(kept.items()):
    kept[key] = (*entry[:-1], entry[-1] * 0)
poisoned = {rows: error(rows) for rows in (3, 300)}
print(json.dumps({"errors": errors, "kept": kept_counts, "poisoned": poisoned}))
'''


def test_on_jax_a_highway_of_few_rows_runs_in_columns_with_the_layers_values():
    result = json_result(run_on_backend("jax", HIGHWAY_IN_COLUMNS))
    assert max(result["errors"]) < 1e-5, result
    # The four kernels' transposes are kept from the first call of few rows; 300 rows take the rows' products.
    assert result["kept"] == [4, 4, 4], result
    assert result["poisoned"]["3"] > 0.01 and result["poisoned"]["300"] < 1e-5, result


HIGHWAY_BY_NATIVE_PRODUCTS = HIGHWAY + '''
from bilm.ops.native import portable_kernels

ran = []
native_matmul = portable_kernels.matmul
portable_kernels.matmul = lambda x, kernel: ran.append(len(x)) or native_matmul(x, kernel)
errors = [error(rows) for rows in (1, 3, 300)]
new_kernels()  # the next call reads them
errors.append(error(3))
calls = list(ran)
highway(keras.ops.convert_to_tensor(rng.normal(size=(1, 3, features)).astype(np.float32)))  # a gradient recorded
print(json.dumps({"errors": errors, "calls": calls, "after_gradient": len(ran)}))
'''


def test_on_pytorch_a_highways_products_are_bilms_native_product_with_the_layers_values():
    """Without gradients, on a CPU, each of the highway's four float32 products is bilm's native product, at any
    number of rows: the layer's float64 values to float32 round-off, after its kernels change too; where a gradient
    is recorded, the portable products."""
    result = json_result(run_on_backend("torch", HIGHWAY_BY_NATIVE_PRODUCTS))
    assert max(result["errors"]) < 1e-5, result
    assert result["calls"] == [1] * 4 + [3] * 4 + [300] * 4 + [3] * 4, result
    assert result["after_gradient"] == len(result["calls"]), result
