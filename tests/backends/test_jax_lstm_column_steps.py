"""JAX's LSTM at inference on a CPU for a few rows over large kernels (`bilm.backend.jax.lstm_column_steps`): the
portable code's outputs and final states from the kernels' kept transposes, steps past every row's length not run,
and the first layer's distinct tokens padded to a fraction of the call's positions (`distinct_rows`)."""
import pytest

from backend_processes import json_result, run_on_backend
from bilm.models.portable_calls import distinct_rows
from helpers import LSTM_ARRAYS

COLUMN_STEPS_AGREE = """
import json
import jax
import jax.numpy as jnp
import keras
import numpy as np
from bilm.backend import backend_module
from bilm.backend.jax import column_kernels, core, layer_calls, lstm_column_steps
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.models.network_calls import inference_call
from bilm.ops.lstm_scan import lstm_scan

batch = 5
""" + LSTM_ARRAYS + """
distinct = rng.normal(size=(1, 4, dim)).astype(np.float32)
index = rng.integers(0, 4, (batch, time))
worst, zeros_beyond, cases = 0.0, True, 0
for lengths in ([6, 3, 0, 1, 5], [6, 6, 2, 6, 6], [4, 4, 4, 1, 2]):
    lengths = np.array(lengths, np.int32)
    for go_backwards in (False, True):
        for projection in (True, False):
            own, h = layer_arrays(projection)
            for rows, token_index in ((inputs, None), (distinct, index)):
                kwargs = dict(cell_clip=0.8, proj_clip=0.5 if projection else None, go_backwards=go_backwards,
                              token_index=token_index)
                want = lstm_scan(rows, lengths, c0, h, *own, **kwargs, recurrence=backend_module("core").lstm_steps)
                got = lstm_column_steps.lstm_scan_in_columns(
                    rows, lengths, c0, h, *own, **kwargs,
                    transposes=(own[1].T, None if own[3] is None else own[3].T))
                worst = max([worst] + [float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(got, want)])
                zeros_beyond = zeros_beyond and all(not np.asarray(got[0])[row, n:].any()
                                                    for row, n in enumerate(lengths))
                cases += 1

# Steps past `count` are not run: a step that always adds one to its state, run for 3 of 6 steps.
state, outputs = jax.jit(lambda count: core.scan_up_to(
    lambda s, x: (s + 1.0, x * 2.0), jnp.zeros(()), jnp.ones((6, 2)), count))(3)

# A layer's inference call takes the column steps where its batch runs in columns (the rule made to say so here:
# its kernels are small) and bilm's native steps are not built, reading the transposes kept beside the kernels,
# made again once the kernels change.
layer_calls.runs_in_columns = lambda rows, shape: True
layer_calls.native_steps_available = lambda *kernels: False
ran = []
in_columns = layer_calls.lstm_scan_in_columns
layer_calls.lstm_scan_in_columns = lambda *args, **kwargs: ran.append(1) or in_columns(*args, **kwargs)
x, lengths_in = keras.Input((None, dim), name="x"), keras.Input((), dtype="int32", name="lengths")
layer = ProjectedLSTM(units, out, cell_clip=0.8, proj_clip=0.5)
call = inference_call(keras.Model({"x": x, "lengths": lengths_in}, layer(x, lengths_in)[0]))
lengths = np.array([6, 3, 1, 5, 2], np.int32)


def error():
    want = lstm_scan(inputs, lengths, np.zeros((batch, units), np.float32), np.zeros((batch, out), np.float32),
                     *[keras.ops.convert_to_numpy(w) for w in (layer.input_kernel, layer.recurrent_kernel,
                                                                layer.bias, layer.projection_kernel)],
                     cell_clip=0.8, proj_clip=0.5)[0]
    return float(np.abs(np.asarray(call({"x": inputs, "lengths": lengths})) - np.asarray(want)).max())


errors = [error()]
for kernel in layer.column_kernels():
    kernel.assign(rng.normal(size=kernel.shape).astype(np.float32) * 0.5)
errors.append(error())
kept = column_kernels.TRANSPOSES.kept
for key, entry in list(kept.items()):
    kept[key] = (*entry[:-1], entry[-1] * 0)
poisoned = error()
bfloat16 = ProjectedLSTM(units, out, kernel_dtype="bfloat16")
bfloat16.build((batch, time, dim))
print(json.dumps({"worst": worst, "zeros_beyond": zeros_beyond, "cases": cases, "state": float(state),
                  "outputs": np.asarray(outputs)[:, 0].tolist(), "errors": errors, "poisoned": poisoned,
                  "kept": len(kept), "ran": len(ran), "bfloat16_listed": len(bfloat16.column_kernels())}))
"""


@pytest.mark.slow
def test_on_a_cpu_jax_runs_few_rows_in_columns_from_the_kept_transposes_with_the_portable_values():
    """Inputs given in full or picked from distinct rows, with and without a projection, both directions, rows of
    every length (none included): the portable code's outputs and final states to float32 round-off, zeros past each
    row's length; steps past the longest row are not run; a layer's inference call reads the kernels' kept
    transposes (zeroed, its values move), made again once its kernels change; bfloat16 kernels keep none."""
    result = json_result(run_on_backend("jax", COLUMN_STEPS_AGREE))
    assert result["cases"] == 24 and result["zeros_beyond"], result
    assert result["worst"] < 1e-6, result
    assert result["state"] == 3.0 and result["outputs"] == [2.0, 2.0, 2.0, 0.0, 0.0, 0.0], result
    assert result["ran"] == 1 and result["kept"] == 2, result  # one program, traced once
    assert max(result["errors"]) < 1e-6 and result["poisoned"] > 1e-3, result
    assert result["bfloat16_listed"] == 0, result


# Which calls make an LSTM's kernel transposes: the rule of which rows run in columns made to take 4-48 rows here
# (its kernels are small), the native steps built (as on this machine) or not. Each call against the portable code.
TRANSPOSES_MADE = """
import json
import keras
import numpy as np
from bilm.backend.jax import column_kernels, layer_calls
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.models.network_calls import inference_call
from bilm.ops.lstm_scan import lstm_scan

rng = np.random.default_rng(0)
dim, units, out, time = 5, 7, 4, 6
layer_calls.runs_in_columns = lambda rows, shape: 4 <= rows <= 48
native = layer_calls.native_steps_available
x, lengths_in = keras.Input((None, dim), name="x"), keras.Input((), dtype="int32", name="lengths")
layer = ProjectedLSTM(units, out, cell_clip=0.8, proj_clip=0.5)
call = inference_call(keras.Model({"x": x, "lengths": lengths_in}, layer(x, lengths_in)[0]))
kept, worst, made = column_kernels.TRANSPOSES.kept, 0.0, {}
for name, native_built, batch in (("1 row", True, 1), ("5 rows, native", True, 5), ("64 rows", True, 64),
                                  ("5 rows, no native steps", False, 5)):
    layer_calls.native_steps_available = native if native_built else (lambda *kernels: False)
    inputs = rng.normal(size=(batch, time, dim)).astype(np.float32)
    lengths = rng.integers(1, time + 1, batch).astype(np.int32)
    got = np.asarray(call({"x": inputs, "lengths": lengths}))
    want = lstm_scan(inputs, lengths, np.zeros((batch, units), np.float32), np.zeros((batch, out), np.float32),
                     *[keras.ops.convert_to_numpy(w) for w in (layer.input_kernel, layer.recurrent_kernel, layer.bias,
                                                                layer.projection_kernel)],
                     cell_clip=0.8, proj_clip=0.5)[0]
    worst = max(worst, float(np.abs(got - np.asarray(want)).max()))
    made[name] = len(kept)
print(json.dumps({"made": made, "worst": worst, "native": bool(native(layer.recurrent_kernel,
                                                                        layer.projection_kernel))}))
"""


@pytest.mark.slow
def test_an_lstms_kernel_transposes_are_made_only_for_calls_that_read_them():
    """One row, many rows, or rows the native steps run make no transposes of an LSTM's kernels (160 MiB at the
    original size); rows that run in columns, without native steps, make both; every call gives the portable
    values."""
    result = json_result(run_on_backend("jax", TRANSPOSES_MADE))
    assert result["native"], result  # bilm's recurrence for JAX is built on the test machines
    assert result["made"] == {"1 row": 0, "5 rows, native": 0, "64 rows": 0, "5 rows, no native steps": 2}, result
    assert result["worst"] < 1e-5, result


def test_the_distinct_tokens_are_padded_to_a_quarter_a_half_or_all_of_the_positions():
    assert [distinct_rows(n, 768) for n in (1, 192, 193, 285, 384, 385, 768)] == [192, 192, 384, 384, 384, 768, 768]
    assert [distinct_rows(n, 130) for n in (1, 33, 34, 65, 66, 130)] == [33, 33, 65, 65, 130, 130]
    # One sentence, or a few short ones: all of the positions, one program a shape.
    assert [distinct_rows(n, 64) for n in (1, 16, 17, 64)] == [64, 64, 64, 64]
    assert [distinct_rows(n, 65) for n in (1, 17, 33)] == [17, 17, 33]


DISTINCT_ROWS_READ = """
import json, sys
import numpy as np
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.text.batching import Batcher

options_file, weight_file = sys.argv[1:3]
model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
uncached = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros", token_cache_size=0)
shapes = []
run = model.calls._run_contextual
model.calls._run_contextual = lambda inputs: shapes.append(inputs["distinct_encodings"].shape) or run(inputs)
ids = Batcher(None, 7).batch_sentences([["the", "cat", "sat"] * 7] * 8)  # 8 x 23 positions, 6 distinct
got, want = (np.asarray(m(ids)["lm_embeddings"]) for m in (model, uncached))
print(json.dumps({"shapes": shapes, "deviation": float(np.abs(got - want).max())}))
"""


def test_on_jax_the_first_layer_reads_the_distinct_tokens_padded_to_a_quarter_of_the_positions(tmp_path):
    """8 sentences of 21 words, 3 of them distinct: 8 x 24 positions, whose distinct tokens (the words, the two
    boundaries and the padding's empty token) are padded to 48 rows, not 192; the vectors of the model without its
    token cache to float32 round-off."""
    from helpers import write_model

    options_file, weight_file, _ = write_model(tmp_path)
    result = json_result(run_on_backend("jax", DISTINCT_ROWS_READ, options_file, weight_file))
    assert result["shapes"] == [[1, 48, result["shapes"][0][2]]], result
    assert result["deviation"] < 1e-5, result
