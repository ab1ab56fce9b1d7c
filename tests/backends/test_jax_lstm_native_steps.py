"""JAX's LSTM at inference on a CPU by bilm's native recurrence, an XLA custom call
(`bilm.backend.jax.lstm_native_steps`): the portable steps' outputs and final states, each row's values the same
bytes beside any other rows, a layer's call taking it where its batch runs in columns, and a machine where it
cannot be built told so once, its layers on JAX's own steps."""
import pytest

from backend_processes import json_result, run_on_backend
from helpers import LSTM_ARRAYS

NATIVE_STEPS_AGREE = """
import json
import jax
import jax.numpy as jnp
import keras
import numpy as np
from bilm.backend.jax import layer_calls, lstm_native_steps
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.models.network_calls import inference_call
from bilm.ops.lstm_scan import lstm_scan, lstm_steps

batch = 5
""" + LSTM_ARRAYS + """
gates = rng.normal(size=(time, batch, 4 * units)).astype(np.float32)
distinct = rng.normal(size=(4, 4 * units)).astype(np.float32)
index = rng.integers(0, 4, (time, batch)).astype(np.int32)
native = jax.jit(lstm_native_steps.lstm_steps, static_argnums=(6, 7))
worst, worst_bfloat16, zeros_beyond, cases = 0.0, 0.0, True, 0
for lengths in ([6, 3, 0, 1, 5], [6, 6, 2, 6, 6], [0, 0, 0, 0, 0]):
    valid = (np.arange(time)[:, None] < np.array(lengths)[None, :])[..., None]
    for projection in (True, False):
        recurrent = kernels[1] if projection else rng.normal(size=(units, 4 * units)).astype(np.float32) * 0.5
        projection_kernel = kernels[3] if projection else None
        h = h0 if projection else rng.normal(size=(batch, units)).astype(np.float32)
        clips = (0.8, 0.5 if projection else None)
        for rows, gate_index, bias in ((gates, None, None), (distinct, index, kernels[2])):
            args = (jnp.asarray(rows), jnp.asarray(valid), c0, h, recurrent, projection_kernel, *clips)
            want = lstm_steps(*args, gate_index=gate_index, bias=bias)
            got = native(*args, gate_index=gate_index, bias=bias)
            worst = max([worst] + [float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(got, want)])
            zeros_beyond = zeros_beyond and all(not np.asarray(got[0])[n:, row].any() for row, n in enumerate(lengths))
            # bfloat16 kernels, against the portable steps on the same kernels widened
            narrow = [None if k is None else jnp.asarray(k, jnp.bfloat16) for k in (recurrent, projection_kernel)]
            wide = [None if k is None else np.asarray(k, np.float32) for k in narrow]
            want = lstm_steps(*args[:4], *wide, *clips, gate_index=gate_index, bias=bias)
            got = native(*args[:4], *narrow, *clips, gate_index=gate_index, bias=bias)
            worst_bfloat16 = max([worst_bfloat16] + [float(np.abs(np.asarray(a) - np.asarray(b)).max())
                                                     for a, b in zip(got, want)])
            cases += 1

# Row 0's outputs and states, the same bytes alone and beside four other rows.
lengths = np.array([4, 6, 2, 5, 1])
valid = (np.arange(time)[:, None] < lengths[None, :])[..., None]
args = (kernels[1], kernels[3], 0.8, 0.5)
beside = native(jnp.asarray(gates), jnp.asarray(valid), c0, h0, *args)
alone = native(jnp.asarray(gates[:, :1]), jnp.asarray(valid[:, :1]), c0[:1], h0[:1], *args)
same_bytes = all(np.asarray(a)[..., :1, :].tobytes() == np.asarray(b)[..., :1, :].tobytes()
                 for a, b in [(beside[0], alone[0])]) and all(
    np.asarray(a)[:1].tobytes() == np.asarray(b).tobytes() for a, b in zip(beside[1:], alone[1:]))

# The scan's steps a chunk at a time (the gates' budgets made tiny: chunks of 2 and of 1 step), each chunk on the
# rows inside their length at its start (5 rows, or 4 once two have ended; none past the longest row), rows given or
# picked from distinct rows, both directions: the portable scan's values.
chunked_worst, chunked_runs = 0.0, []
recurrence = lstm_native_steps._recurrence
lstm_native_steps._recurrence = lambda *args: chunked_runs.append(args[0].shape[:2]) or recurrence(*args)
lengths = np.array([4, 3, 0, 1, 4])  # steps 4 and 5 past every row
lstm_native_steps.DISTINCT_GATES_BYTES = 1
for budget in (2 * batch * 4 * units * 4, 1):
    lstm_native_steps.GATES_AT_ONCE_BYTES = budget
    for token_index in (None, rng.integers(0, 3, (batch, time)).astype(np.int32)):
        rows = inputs if token_index is None else inputs[:1, :3]
        for go_backwards in (False, True):
            want = lstm_scan(rows, lengths, c0, h0, *kernels, 0.8, 0.5, go_backwards, token_index)
            got = jax.jit(lambda *arrays: lstm_native_steps.lstm_scan_native(  # traced anew for each budget
                *arrays[:-1], 0.8, 0.5, go_backwards, arrays[-1]))(rows, lengths, c0, h0, *kernels, token_index)
            chunked_worst = max([chunked_worst] + [float(np.abs(np.asarray(a) - np.asarray(b)).max())
                                                   for a, b in zip(got, want)])
lstm_native_steps._recurrence = recurrence

# Distinct rows' gates made once, by pieces of 2 rows: of 7 rows, the 3 that the steps read, and the pieces past them
# not made; the portable scan's values.
lstm_native_steps.DISTINCT_GATES_BYTES, lstm_native_steps.PRODUCT_PIECE_ROWS = 1 << 30, 2
seven = rng.normal(size=(1, 7, dim)).astype(np.float32)
picks = rng.integers(0, 3, (batch, time)).astype(np.int32)
picks[0, 0] = 2
distinct_worst = 0.0
for go_backwards in (False, True):
    want = lstm_scan(seven, lengths, c0, h0, *kernels, 0.8, 0.5, go_backwards, picks)
    got = jax.jit(lambda *arrays: lstm_native_steps.lstm_scan_native(
        *arrays[:-1], 0.8, 0.5, go_backwards, arrays[-1]))(seven, lengths, c0, h0, *kernels, picks)
    distinct_worst = max([distinct_worst] + [float(np.abs(np.asarray(a) - np.asarray(b)).max())
                                             for a, b in zip(got, want)])
made = np.asarray(lstm_native_steps.used_rows_product(jnp.asarray(seven[0]), kernels[0], "float32", 3))
pieces_made = [bool(row.any()) for row in made]

# A layer's inference call takes the native steps where its batch runs in columns (the rule made to say so here).
layer_calls.runs_in_columns = lambda rows, shape: True
ran = []
lstm_scan_native = layer_calls.lstm_scan_native
layer_calls.lstm_scan_native = lambda *args, **kwargs: ran.append(1) or lstm_scan_native(*args, **kwargs)
x, lengths_in = keras.Input((None, dim), name="x"), keras.Input((), dtype="int32", name="lengths")
layer = ProjectedLSTM(units, out, cell_clip=0.8, proj_clip=0.5, go_backwards=True)
call = inference_call(keras.Model({"x": x, "lengths": lengths_in}, layer(x, lengths_in)[0]))
want = lstm_scan(inputs, lengths, np.zeros((batch, units), np.float32), np.zeros((batch, out), np.float32),
                 *[keras.ops.convert_to_numpy(w) for w in (layer.input_kernel, layer.recurrent_kernel, layer.bias,
                                                           layer.projection_kernel)],
                 cell_clip=0.8, proj_clip=0.5, go_backwards=True)[0]
layer_error = float(np.abs(np.asarray(call({"x": inputs, "lengths": lengths})) - np.asarray(want)).max())
print(json.dumps({"worst": worst, "worst_bfloat16": worst_bfloat16, "zeros_beyond": zeros_beyond, "cases": cases,
                  "same_bytes": bool(same_bytes), "ran": len(ran), "layer_error": layer_error,
                  "chunked_worst": chunked_worst, "chunked_runs": chunked_runs, "distinct_worst": distinct_worst,
                  "pieces_made": pieces_made}))
"""


@pytest.mark.slow
def test_on_a_cpu_jaxs_native_steps_give_the_portable_steps_values_and_each_rows_own_bytes():
    """Gates in full or picked from distinct rows with a bias, with and without a projection, rows of every length
    (none at all included): the portable steps' outputs and final states to float32 round-off (bfloat16 kernels: to
    the round-off of their products), zeros past each row's length; a row's values the same bytes alone and beside
    others; run a chunk of steps at a time, or over distinct rows' gates made once (pieces past the rows read not
    made), the portable scan's values; a layer's inference call on a batch that runs in columns takes them, with the
    portable values."""
    result = json_result(run_on_backend("jax", NATIVE_STEPS_AGREE))
    assert result["cases"] == 12 and result["zeros_beyond"], result
    assert result["worst"] < 1e-6, result
    assert result["worst_bfloat16"] < 2e-2, result
    assert result["same_bytes"], result
    assert result["ran"] == 1 and result["layer_error"] < 1e-6, result
    # Traced for 5 rows and for 4 a case: 4 cases of chunks of 2 steps, then 4 of 1 step.
    assert result["chunked_runs"] == [[2, 5], [2, 4]] * 4 + [[1, 5], [1, 4]] * 4, result
    assert result["chunked_worst"] < 1e-6, result
    assert result["distinct_worst"] < 1e-6 and result["pieces_made"] == [True] * 4 + [False] * 3, result


NO_COMPILER = """
import json, warnings
import keras
import numpy as np
from bilm.backend.jax import layer_calls
from bilm.ops.native import xla_kernels
from bilm.layers.projected_lstm import ProjectedLSTM

layer_calls.runs_in_columns = lambda rows, shape: True
layer = ProjectedLSTM(7, 4, cell_clip=0.8, proj_clip=0.5)
x = np.random.default_rng(0).normal(size=(5, 6, 3)).astype(np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = layer(x, np.array([6, 3, 1, 5, 2], np.int32))[0]
    second = layer(x, np.array([6, 3, 1, 5, 2], np.int32))[0]
print(json.dumps({"warnings": [str(w.message) for w in caught if w.category is RuntimeWarning],
                  "registered": xla_kernels.register(), "finite": bool(np.isfinite(np.asarray(first)).all()),
                  "same": bool((np.asarray(first) == np.asarray(second)).all())}))
"""


def test_without_a_compiler_jax_says_so_once_and_runs_its_own_steps(tmp_path):
    result = json_result(run_on_backend("jax", NO_COMPILER, environment={
        "CXX": "no-such-compiler", "BILM_NATIVE_DIR": str(tmp_path)}))
    assert result["registered"] is False and result["finite"] and result["same"], result
    assert len(result["warnings"]) == 1 and "could not build its LSTM recurrence for JAX" in result["warnings"][0] \
        and "no-such-compiler" in result["warnings"][0], result
