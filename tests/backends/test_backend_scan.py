"""Each backend's `core.lstm_steps` (what `ProjectedLSTM` runs its recurrence with: the portable steps on the
backend's `core.scan`, PyTorch's own loop, or, where PyTorch records no gradient on a CPU, bilm's native recurrence)
against the steps every backend runs (`lstm_scan`'s default, on `carry_shaped_scan`): the same outputs and final
states, to the bit where the backend's own steps run and to float32 round-off where the native recurrence does, and
the same gradients: on PyTorch to the bit, on JAX (whose steps' backward pass is written by hand) to float32
round-off."""
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
# Rows of every length kind, including steps that every row reaches and batches of one length.
LENGTHS = [np.array(case, np.int32) for case in ([6, 3, 0], [6, 6, 2], [6, 6, 6])]
c0, h0 = rng.normal(size=(batch, units)).astype(np.float32), rng.normal(size=(batch, out)).astype(np.float32)
kernels = [rng.normal(size=shape).astype(np.float32) * 0.5
           for shape in ((dim, 4 * units), (out, 4 * units), (4 * units,), (units, out))]
worst, checked, identical = 0.0, 0, True  # clips that bind (the states reach past them)
# PyTorch's own loop runs where a gradient is recorded (elsewhere the native recurrence, to round-off): kernels
# that require one.
own_kernels = kernels
if keras.backend.backend() == "torch":
    import torch

    own_kernels = [torch.tensor(kernel, requires_grad=True) for kernel in kernels]
zeros_beyond = True
# The first layer's call: the rows of 4 distinct tokens, picked by a token index (the gates each recurrence
# picks, in place where it can), against the same rows given in full (their products of another row count: to
# float32 round-off).
distinct = rng.normal(size=(1, 4, dim)).astype(np.float32)
token_index = rng.integers(0, 4, (batch, time)).astype(np.int32)
picked_worst = 0.0
for case in LENGTHS:
    for go_backwards in (False, True):
        results = [lstm_scan(inputs, case, c0, h0, *own_kernels, cell_clip=0.8, proj_clip=0.5,
                             go_backwards=go_backwards, recurrence=recurrence)
                   for recurrence in (None, backend_module("core").lstm_steps)]
        picked = [lstm_scan(rows, case, c0, h0, *kernels, cell_clip=0.8, proj_clip=0.5, go_backwards=go_backwards,
                            token_index=index, recurrence=backend_module("core").lstm_steps)
                  for rows, index in ((distinct, token_index), (distinct[0][token_index], None))]
        picked_worst = max([picked_worst] + [float(np.abs(keras.ops.convert_to_numpy(a) - keras.ops.convert_to_numpy(b))
                                                      .max()) for a, b in zip(*picked)])
        for default, own in zip(*results):
            default, own = keras.ops.convert_to_numpy(default), keras.ops.convert_to_numpy(own)
            assert default.shape == own.shape, (default.shape, own.shape)
            worst, checked = max(worst, float(np.abs(default - own).max())), checked + 1
            identical = identical and default.tobytes() == own.tobytes()
        outputs = keras.ops.convert_to_numpy(results[1][0])
        zeros_beyond = zeros_beyond and all(np.all(outputs[row, length:] == 0) for row, length in enumerate(case))

# The gradients of every input and kernel through each (on PyTorch, whose own loop autograd differentiates).
gradients_identical = None
if keras.backend.backend() == "torch":
    import torch

    gradients_identical = True
    for case in LENGTHS:
        gradients = []
        for recurrence in (None, backend_module("core").lstm_steps):
            leaves = [torch.tensor(array, requires_grad=True) for array in (inputs, c0, h0, *kernels)]
            out, c, h = lstm_scan(leaves[0], case, *leaves[1:3], *leaves[3:], cell_clip=0.8, proj_clip=0.5,
                                  go_backwards=True, recurrence=recurrence)
            ((out ** 2).sum() + (c * 0.5).sum() + h.sum()).backward()
            gradients.append([leaf.grad.numpy().tobytes() for leaf in leaves])
        gradients_identical = gradients_identical and gradients[0] == gradients[1]

# On JAX, whose own steps have a hand-written backward pass: the gradients against JAX's autodiff of the portable
# steps, relative to each gradient's largest value, with and without a projection, both directions.
gradients_worst = None
if keras.backend.backend() == "jax":
    import jax

    gradients_worst = 0.0
    for projection in (True, False):
        for go_backwards in (False, True):
            units_out = out if projection else units
            leaves = (inputs, c0, rng.normal(size=(batch, units_out)).astype(np.float32), kernels[0],
                      rng.normal(size=(units_out, 4 * units)).astype(np.float32) * 0.5, kernels[2],
                      kernels[3] if projection else None)

            def loss(leaves, recurrence):
                out_, c, h = lstm_scan(leaves[0], LENGTHS[0], *leaves[1:], cell_clip=0.8,
                                       proj_clip=0.5 if projection else None, go_backwards=go_backwards,
                                       recurrence=recurrence)
                return (out_ ** 2).sum() + (c * 0.5).sum() + h.sum()

            autodiff, own = (jax.jit(jax.grad(loss), static_argnums=1)(leaves, recurrence)
                             for recurrence in (None, backend_module("core").lstm_steps))
            for a, b in zip(autodiff, own):
                if a is not None:
                    gradients_worst = max(gradients_worst, float(np.abs(a - b).max() / np.abs(a).max()))
print(json.dumps({"worst": worst, "checked": checked, "identical": identical, "zeros_beyond": zeros_beyond,
                  "picked_worst": picked_worst,
                  "output_shape": list(outputs.shape), "gradients_identical": gradients_identical,
                  "gradients_worst": gradients_worst}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_backends_own_steps_give_the_portable_steps_outputs_and_states(backend):
    result = json_result(run_on_backend(backend, SCANS_AGREE))
    assert result["checked"] == 18 and result["worst"] == 0 and result["identical"], result
    assert result["gradients_identical"] is (True if backend == "torch" else None), result
    # JAX's hand-written backward pass sums over the steps in another order than autodiff: float32 round-off.
    assert (result["gradients_worst"] < 1e-5) if backend == "jax" else result["gradients_worst"] is None, result
    assert result["zeros_beyond"] and result["output_shape"] == [3, 6, 4]
    assert result["picked_worst"] < 1e-5, result


COLUMNS_AGREE = """
import json
import jax
import numpy as np
from bilm.backend.jax import core, lstm_bptt
from bilm.ops.lstm_scan import lstm_scan

rules = {"original, 32 rows": lstm_bptt.runs_in_columns(32, (512, 16384)),
         "original, 1 row": lstm_bptt.runs_in_columns(1, (512, 16384)),
         "original, 64 rows": lstm_bptt.runs_in_columns(64, (512, 16384)),
         "small, 32 rows": lstm_bptt.runs_in_columns(32, (128, 4096))}
ran = []
column_steps = lstm_bptt._column_steps
lstm_bptt._column_steps = lambda *args: ran.append(args[2].shape[1]) or column_steps(*args)
lstm_bptt.COLUMN_MIN_KERNEL_VALUES = 0  # these small kernels' steps in columns too
rng = np.random.default_rng(1)
time, dim, units, out = 6, 5, 8, 4
worst, zeros_beyond = 0.0, True
for batch in (1, 8, 48, 64):
    inputs = rng.normal(size=(batch, time, dim)).astype(np.float32)
    lengths = rng.integers(0, time + 1, batch).astype(np.int32)
    for projection in (True, False):
        width = out if projection else units
        c0, h0 = rng.normal(size=(batch, units)).astype(np.float32), rng.normal(size=(batch, width)).astype(np.float32)
        kernels = [rng.normal(size=shape).astype(np.float32) * 0.5 for shape in
                   ((dim, 4 * units), (width, 4 * units), (4 * units,), (units, out))]
        kernels[3] = kernels[3] if projection else None
        for go_backwards in (False, True):
            results = [jax.jit(lambda x, c, h, *k: lstm_scan(
                x, lengths, c, h, *k, cell_clip=0.8, proj_clip=0.5 if projection else None, go_backwards=go_backwards,
                recurrence=recurrence))(inputs, c0, h0, *kernels) for recurrence in (None, core.lstm_steps)]
            for portable, own in zip(*results):
                worst = max(worst, float(np.abs(np.asarray(portable) - np.asarray(own)).max()))
            outputs = np.asarray(results[1][0])
            zeros_beyond = zeros_beyond and all(np.all(outputs[row, n:] == 0) for row, n in enumerate(lengths))
print(json.dumps({"rules": rules, "ran": sorted(set(ran)), "calls": len(ran), "worst": worst,
                  "zeros_beyond": zeros_beyond}))
"""


@pytest.mark.slow
def test_on_a_cpu_jax_runs_a_few_rows_steps_in_columns_with_the_portable_values():
    """Where no gradient is taken, a batch of `COLUMN_BATCH_SIZES` rows over a large recurrent kernel (the original
    size's, not the small size's) runs its steps with the states in columns (`_column_steps`, faster in XLA's CPU
    dot), with the portable steps' outputs and final states to float32 round-off, with and without a projection,
    both directions, rows of every length (none included); one row, or 64, runs the portable steps themselves."""
    result = json_result(run_on_backend("jax", COLUMNS_AGREE))
    assert result["rules"] == {"original, 32 rows": True, "original, 1 row": False, "original, 64 rows": False,
                               "small, 32 rows": False}, result
    assert result["ran"] == [8, 48] and result["calls"] == 8, result
    assert result["worst"] < 1e-5 and result["zeros_beyond"], result


TORCH_NATIVE_AGREE = """
import json
import warnings
import numpy as np
import torch
from bilm.backend.torch import core
from bilm.ops.native import portable_kernels

ran = []
native_steps = portable_kernels.lstm_steps
portable_kernels.lstm_steps = lambda *args, **kwargs: ran.append(args[0].shape[1]) or native_steps(*args, **kwargs)
rng = np.random.default_rng(1)
time, units, out = 6, 32, 8
worst, zeros_beyond, alone_identical = 0.0, True, True
for batch in (1, 3, 16, 65):
    lengths = rng.integers(0, time + 1, batch)
    valid = torch.tensor((np.arange(time)[:, None] < lengths[None, :])[..., None])
    gates = torch.tensor(rng.normal(size=(time, batch, 4 * units)).astype(np.float32))
    for projection in (True, False):
        width = out if projection else units
        c0, h0 = (torch.tensor(rng.normal(size=(batch, n)).astype(np.float32)) for n in (units, width))
        recurrent = torch.tensor(rng.normal(size=(width, 4 * units)).astype(np.float32) * 0.5)
        projection_kernel = torch.tensor(rng.normal(size=(units, out)).astype(np.float32) * 0.5) if projection else None
        kernels_and_clips = (recurrent, projection_kernel, 0.8, 0.5 if projection else None)
        with torch.no_grad():
            native = core.lstm_steps(gates, valid, c0, h0, *kernels_and_clips)
            rows = core._loop(gates, valid, c0, h0, *kernels_and_clips)
            last = batch - 1  # the last row alone: the same bytes as among the others
            alone = core.lstm_steps(gates[:, last:], valid[:, last:], c0[last:], h0[last:], *kernels_and_clips)
        worst = max([worst] + [float((a - b).abs().max()) for a, b in zip(native, rows)])
        zeros_beyond = zeros_beyond and all(bool(torch.all(native[0][n:, row] == 0)) for row, n in enumerate(lengths))
        alone_identical = alone_identical and all(
            a.numpy().tobytes() == b.numpy().tobytes()
            for a, b in zip(alone, (native[0][:, last:], native[1][last:], native[2][last:])))
        core.lstm_steps(gates.requires_grad_(), valid, c0, h0, *kernels_and_clips)  # autograd's: torch's loop
        gates = gates.detach()
calls = len(ran)
# A mask that is not each row's first steps: torch's loop, the same values.
holes = valid.clone()
holes[0, 0] = False
# Rows picked by a gate index (one per distinct token) and a bias added, read in place: the same bytes as the
# picked rows given in full, the bias added; under autograd, torch's loop on them.
distinct_gates = torch.tensor(rng.normal(size=(5, 4 * units)).astype(np.float32))
gate_index = torch.tensor(rng.integers(0, 5, (time, len(c0))).astype(np.int32))
bias = torch.tensor(rng.normal(size=4 * units).astype(np.float32))
with torch.no_grad():
    fallback = core.lstm_steps(gates, holes, c0, h0, *kernels_and_clips)
    expected = core._loop(gates, holes, c0, h0, *kernels_and_clips)
    in_place = core.lstm_steps(distinct_gates, valid, c0, h0, *kernels_and_clips, gate_index=gate_index, bias=bias)
    given = core.lstm_steps((distinct_gates + bias)[gate_index.long()], valid, c0, h0, *kernels_and_clips)
looped = core.lstm_steps(distinct_gates.requires_grad_(), valid, c0, h0, *kernels_and_clips, gate_index=gate_index,
                         bias=bias)
print(json.dumps({"ran": sorted(set(ran[:calls])), "calls": calls, "worst": worst, "zeros_beyond": zeros_beyond,
                  "alone_identical": alone_identical,
                  "holes_equal": all(torch.equal(a, b) for a, b in zip(fallback, expected)),
                  "picked_calls": len(ran) - calls,
                  "picked_identical": all(a.numpy().tobytes() == b.numpy().tobytes() for a, b in zip(in_place, given)),
                  "looped_worst": max(float((a.detach() - b).abs().max()) for a, b in zip(looped, given))}))
"""


@pytest.mark.slow
def test_on_a_cpu_torch_runs_its_steps_by_bilms_native_recurrence_where_no_gradient_is_taken():
    """Without gradients, on a CPU, PyTorch's steps run bilm's native recurrence (`portable_kernels`: the loop
    and products of TensorFlow's op, through ctypes): torch's own steps' outputs and final states to float32 round-off,
    with and without a projection, rows of every length (none included), zeros past each row's length, and each
    row the same bytes alone as beside others (a lone row's call included), gates picked by an index and a bias
    read in place as the same bytes; any step autograd records, and a mask that is not each row's first steps,
    run torch's own loop."""
    result = json_result(run_on_backend("torch", TORCH_NATIVE_AGREE))
    assert result["ran"] == [1, 3, 16, 65] and result["calls"] == 16, result
    assert result["worst"] < 1e-5 and result["zeros_beyond"] and result["alone_identical"], result
    assert result["holes_equal"], result
    assert result["picked_calls"] == 2 and result["picked_identical"] and result["looped_worst"] < 1e-5, result


TORCH_NATIVE_INPUT_HALF = """
import json
import keras
import numpy as np
import torch
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.ops.lstm_scan import lstm_scan
from bilm.ops.native import portable_kernels

rng = np.random.default_rng(3)
batch, time, dim, units, out = 3, 6, 5, 7, 4
ran = []
native_matmul = portable_kernels.matmul
portable_kernels.matmul = lambda x, kernel: ran.append(len(x)) or native_matmul(x, kernel)
layer = ProjectedLSTM(units, out, cell_clip=0.8, proj_clip=0.5)
layer.build((batch, time, dim))
weights = [keras.ops.convert_to_numpy(w) for w in (layer.input_kernel, layer.recurrent_kernel, layer.bias,
                                                    layer.projection_kernel)]
inputs = rng.normal(size=(batch, time, dim)).astype(np.float32)
lengths = np.array([6, 2, 4], np.int32)
distinct = rng.normal(size=(1, 4, dim)).astype(np.float32)
token_index = rng.integers(0, 4, (batch, time)).astype(np.int32)
zeros = np.zeros((batch, units), np.float32), np.zeros((batch, out), np.float32)
worst, alone_identical, calls = 0.0, True, []
for rows, index in ((inputs, None), (distinct, token_index)):
    want = lstm_scan(rows, lengths, *zeros, *weights, cell_clip=0.8, proj_clip=0.5, token_index=index)[0]
    with torch.no_grad():
        got = layer(torch.tensor(rows), torch.tensor(lengths), token_index=index if index is None else torch.tensor(
            index))[0]
        # The last row alone: the same bytes as beside the others.
        alone = layer(torch.tensor(rows if index is not None else rows[-1:]), torch.tensor(lengths[-1:]),
                      token_index=None if index is None else torch.tensor(index[-1:]))[0]
    calls.append(list(ran))
    ran.clear()
    worst = max(worst, float(np.abs(got.numpy() - np.asarray(want)).max()))
    alone_identical = alone_identical and got.numpy()[-1:].tobytes() == alone.numpy().tobytes()
layer(torch.tensor(inputs), torch.tensor(lengths))  # a gradient recorded: the portable product
print(json.dumps({"calls": calls, "worst": worst, "alone_identical": alone_identical, "after_gradient": len(ran)}))
"""


@pytest.mark.slow
def test_on_a_cpu_torch_makes_an_lstms_input_half_by_bilms_native_product_where_no_gradient_is_taken():
    """Without gradients, on a CPU, a PyTorch LSTM layer's input half is bilm's native product: for the 12
    positions inside the rows' lengths (one row a position), or for the 4 distinct rows a token index picks; the
    portable values to float32 round-off, and a row's outputs the same bytes alone as beside others. Where a
    gradient is recorded, the portable product."""
    result = json_result(run_on_backend("torch", TORCH_NATIVE_INPUT_HALF))
    assert result["calls"] == [[12, 4], [4, 4]], result
    assert result["worst"] < 1e-5 and result["alone_identical"], result
    assert result["after_gradient"] == 0, result


TORCH_WITHOUT_COMPILER = """
import json
import warnings
import numpy as np
import torch
from bilm.backend.torch import core

rng = np.random.default_rng(2)
gates = torch.tensor(rng.normal(size=(4, 3, 16)).astype(np.float32))
valid = torch.tensor((np.arange(4)[:, None] < np.array([4, 2, 0])[None, :])[..., None])
state = (torch.zeros(3, 4), torch.zeros(3, 4), torch.tensor(rng.normal(size=(4, 16)).astype(np.float32)), None)
with warnings.catch_warnings(record=True) as caught, torch.no_grad():
    warnings.simplefilter("always")
    results = [core.lstm_steps(gates, valid, *state, 3.0, None) for _ in range(2)]
    expected = core._loop(gates, valid, *state, 3.0, None)
print(json.dumps({"warnings": [str(w.message) for w in caught if w.category is RuntimeWarning],
                  "equal": all(torch.equal(a, b) for result in results for a, b in zip(result, expected))}))
"""


@pytest.mark.slow
def test_where_the_native_recurrence_cannot_be_built_torch_says_so_once_and_runs_its_own_steps(tmp_path):
    """No C++ compiler: one RuntimeWarning names what failed, and PyTorch's steps run as torch's own loop, the same
    values."""
    result = json_result(run_on_backend("torch", TORCH_WITHOUT_COMPILER, environment={
        "CXX": "no-such-compiler", "BILM_NATIVE_DIR": str(tmp_path)}))
    assert result["equal"], result
    assert len(result["warnings"]) == 1, result
    assert "could not build its native CPU kernels" in result["warnings"][0], result
    assert "no-such-compiler" in result["warnings"][0], result


NUMPY_NATIVE_AGREE = """
import json
import numpy as np
from bilm.backend.numpy import core
from bilm.ops.lstm_scan import lstm_steps
from bilm.ops.native import portable_kernels

ran = []
native_steps = portable_kernels.lstm_steps
portable_kernels.lstm_steps = lambda *args, **kwargs: ran.append(args[0].shape[1]) or native_steps(*args, **kwargs)
rng = np.random.default_rng(3)
time, batch, units, out = 5, 4, 8, 4
lengths = np.array([5, 0, 3, 5])
valid = (np.arange(time)[:, None] < lengths[None, :])[..., None]
gates = rng.normal(size=(time, batch, 4 * units)).astype(np.float32)
c0, h0 = rng.normal(size=(batch, units)).astype(np.float32), rng.normal(size=(batch, out)).astype(np.float32)
kernels = (rng.normal(size=(out, 4 * units)).astype(np.float32) * 0.5,
           rng.normal(size=(units, out)).astype(np.float32) * 0.5, 0.8, 0.5)
own, portable = core.lstm_steps(gates, valid, c0, h0, *kernels), lstm_steps(gates, valid, c0, h0, *kernels)
print(json.dumps({"ran": ran, "worst": max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                                           for a, b in zip(own, portable))}))
"""


@pytest.mark.slow
def test_on_keras_numpy_backend_the_steps_are_bilms_native_recurrence_with_the_portable_values():
    """On Keras's NumPy backend the LSTM's steps run bilm's native recurrence: the portable steps' outputs and final
    states to float32 round-off."""
    result = json_result(run_on_backend("numpy", NUMPY_NATIVE_AGREE))
    assert result["ran"] == [4] and result["worst"] < 1e-5, result
