"""Each backend's `core.lstm_steps` (what `ProjectedLSTM` runs its recurrence with: the portable steps on the
backend's `core.scan`, or PyTorch's own loop) against the steps every backend runs (`lstm_scan`'s default, on
`carry_shaped_scan`): the same outputs and final states, to the bit, and on PyTorch the same gradients."""
import pytest

from backend_processes import json_result, run_on_backend

SCANS_AGREE = """
import json
import keras
import numpy as np
from bilm.backend import backend_module
from bilm.ops.lstm_scan import lstm_scan

rng = np.random.default_rng(0)
batch, time, dim, units, out = 3, 6, 5, 7, 4
inputs = rng.normal(size=(batch, time, dim)).astype(np.float32)
lengths = np.array([6, 3, 0], np.int32)
c0, h0 = rng.normal(size=(batch, units)).astype(np.float32), rng.normal(size=(batch, out)).astype(np.float32)
kernels = [rng.normal(size=shape).astype(np.float32) * 0.5
           for shape in ((dim, 4 * units), (out, 4 * units), (4 * units,), (units, out))]
worst, checked, identical = 0.0, 0, True  # clips that bind (the states reach past them)
for go_backwards in (False, True):
    results = [lstm_scan(inputs, lengths, c0, h0, *kernels, cell_clip=0.8, proj_clip=0.5, go_backwards=go_backwards,
                         recurrence=recurrence) for recurrence in (None, backend_module("core").lstm_steps)]
    for default, own in zip(*results):
        default, own = keras.ops.convert_to_numpy(default), keras.ops.convert_to_numpy(own)
        assert default.shape == own.shape, (default.shape, own.shape)
        worst, checked = max(worst, float(np.abs(default - own).max())), checked + 1
        identical = identical and default.tobytes() == own.tobytes()
    outputs = np.asarray(results[1][0])
    zeros_beyond = bool(np.all(outputs[1, 3:] == 0) and np.all(outputs[2] == 0))

# The gradients of every input and kernel through each (on PyTorch, whose own loop autograd differentiates).
gradients_identical = None
if keras.backend.backend() == "torch":
    import torch

    gradients = []
    for recurrence in (None, backend_module("core").lstm_steps):
        leaves = [torch.tensor(array, requires_grad=True) for array in (inputs, c0, h0, *kernels)]
        out, c, h = lstm_scan(leaves[0], lengths, *leaves[1:3], *leaves[3:], cell_clip=0.8, proj_clip=0.5,
                              go_backwards=True, recurrence=recurrence)
        ((out ** 2).sum() + (c * 0.5).sum() + h.sum()).backward()
        gradients.append([leaf.grad.numpy().tobytes() for leaf in leaves])
    gradients_identical = gradients[0] == gradients[1]
print(json.dumps({"worst": worst, "checked": checked, "identical": identical, "zeros_beyond": zeros_beyond,
                  "output_shape": list(outputs.shape), "gradients_identical": gradients_identical}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_backends_own_steps_give_the_portable_steps_outputs_and_states(backend):
    result = json_result(run_on_backend(backend, SCANS_AGREE))
    assert result["checked"] == 6 and result["worst"] == 0 and result["identical"], result
    assert result["gradients_identical"] is (True if backend == "torch" else None), result
    assert result["zeros_beyond"] and result["output_shape"] == [3, 6, 4]
