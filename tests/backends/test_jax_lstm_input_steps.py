"""JAX's LSTM at inference on a CPU, each step's input half computed in the step
(`bilm.backend.jax.lstm_input_steps`): the portable code's outputs and final states, and the layer's call takes it
where no gradient is asked for."""
import pytest

from backend_processes import json_result, run_on_backend
from helpers import LSTM_ARRAYS

INPUT_STEPS_AGREE = """
import json
import numpy as np
from bilm.backend import backend_module
from bilm.backend.jax import layer_calls, lstm_input_steps
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.ops.lstm_scan import lstm_scan

batch = 3
""" + LSTM_ARRAYS + """
# Token indices into 4 distinct rows and into as many rows as the steps' (the token cache's calls pad them so).
few, many = (rng.normal(size=(1, n, dim)).astype(np.float32) for n in (4, batch * time))
index = {"few": rng.integers(0, 4, (batch, time)), "many": rng.integers(0, batch * time, (batch, time))}
worst, identical, zeros_beyond, cases = 0.0, True, True, 0
steps = backend_module("core").lstm_steps
for lengths in ([6, 3, 0], [6, 6, 2], [6, 6, 6]):
    lengths = np.array(lengths, np.int32)
    for go_backwards in (False, True):
        for projection in (True, False):
            width = out if projection else units
            own, h = layer_arrays(projection)
            for rows, token_index in ((inputs, None), (few, index["few"]), (many, index["many"])):
                args = (rows, lengths, c0, h, *own)
                kwargs = dict(cell_clip=0.8, proj_clip=0.5 if projection else None, go_backwards=go_backwards,
                              token_index=token_index)
                want = lstm_scan(*args, **kwargs, recurrence=steps)
                got = lstm_input_steps.lstm_scan_inputs_in_steps(*args, **kwargs, recurrence=steps)
                worst = max([worst] + [float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(got, want)])
                identical = identical and all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
                                              for a, b in zip(got, want))
                zeros_beyond = zeros_beyond and all(not np.asarray(got[0])[row, n:].any()
                                                    for row, n in enumerate(lengths))
                cases += 1

# The layer's call: in steps where no gradient is asked for, the portable code in training.
ran = []
in_steps = layer_calls.lstm_scan_inputs_in_steps
layer_calls.lstm_scan_inputs_in_steps = lambda *args, **kwargs: ran.append(1) or in_steps(*args, **kwargs)
layer = ProjectedLSTM(units, out, cell_clip=0.8, proj_clip=0.5)
layer.build(inputs.shape)
lengths = np.array([6, 3, 1], np.int32)
inference = layer(inputs, lengths, training=False)
after_inference = len(ran)
trained = layer(inputs, lengths, training=True)
training_ran = len(ran) - after_inference
# One row (or two) over the small size's kernels, or a batch of a few rows over the original size's, take one product
# over every step (`lstm_scan`); the rule's cases as measured.
portable = []
scan = lstm_input_steps.lstm_scan
lstm_input_steps.lstm_scan = lambda *args, **kwargs: portable.append(1) or scan(*args, **kwargs)
layer(inputs[:1], lengths[:1], training=False)
pays = lstm_input_steps.input_in_steps_pays
rules = {f"{size}, {rows} rows": pays(rows, (dim, 4 * units), (out, 4 * units))
         for size, dim, units, out in (("small", 128, 1024, 128), ("original", 512, 4096, 512))
         for rows in (1, 32, 512)}
print(json.dumps({"one_row_portable": len(portable), "rules": rules, "worst": worst, "identical": identical,
                  "zeros_beyond": zeros_beyond, "cases": cases,
                  "inference_ran": after_inference, "training_ran": training_ran,
                  "layer_worst": max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                                     for a, b in zip(inference, trained))}))
"""


@pytest.mark.slow
def test_on_a_cpu_jax_computes_each_steps_input_half_in_the_step_with_the_portable_values():
    """Inputs given in full, or picked from a few distinct rows or from as many as the steps' rows: the portable
    code's outputs and final states to float32 round-off, with and without a projection, both directions, rows of
    every length (none included), zeros past each row's length. A layer's call runs it with `training` false, the
    portable code with `training` true, the same values (no dropout in the layer). One row takes the portable
    code, as do the few-row batches of a large kernel (the rule measured)."""
    result = json_result(run_on_backend("jax", INPUT_STEPS_AGREE))
    assert result["cases"] == 36 and result["zeros_beyond"], result
    assert result["worst"] < 1e-6, result
    assert result["inference_ran"] == 1 and result["training_ran"] == 0, result
    assert result["layer_worst"] < 1e-6, result
    assert result["one_row_portable"] == 1, result
    assert result["rules"] == {"small, 1 rows": False, "small, 32 rows": True, "small, 512 rows": True,
                               "original, 1 rows": False, "original, 32 rows": False, "original, 512 rows": True}

