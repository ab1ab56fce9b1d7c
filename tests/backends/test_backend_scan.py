"""Each backend's `core.scan` (what `ProjectedLSTM` runs its recurrence with) against the scan every backend
runs (`carry_shaped_scan`, `lstm_scan`'s default): the same outputs and final states."""
import pytest

from backend_processes import json_result, run_on_backend

SCANS_AGREE = """
import json
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
worst, checked = 0.0, 0
for go_backwards in (False, True):
    results = [lstm_scan(inputs, lengths, c0, h0, *kernels, cell_clip=3.0, proj_clip=3.0, go_backwards=go_backwards,
                         scan=scan) for scan in (None, backend_module("core").scan)]
    for default, own in zip(*results):
        default, own = np.asarray(default), np.asarray(own)
        assert default.shape == own.shape, (default.shape, own.shape)
        worst, checked = max(worst, float(np.abs(default - own).max())), checked + 1
    outputs = np.asarray(results[1][0])
    zeros_beyond = bool(np.all(outputs[1, 3:] == 0) and np.all(outputs[2] == 0))
print(json.dumps({"worst": worst, "checked": checked, "zeros_beyond": zeros_beyond,
                  "output_shape": list(outputs.shape)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_backends_own_scan_gives_the_portable_scans_outputs_and_states(backend):
    result = json_result(run_on_backend(backend, SCANS_AGREE))
    assert result["checked"] == 6 and result["worst"] < 1e-6, result
    assert result["zeros_beyond"] and result["output_shape"] == [3, 6, 4]
