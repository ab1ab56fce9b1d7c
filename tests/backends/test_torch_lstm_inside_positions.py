"""PyTorch's LSTM where no gradient is recorded, its input half made for only the positions inside their rows'
lengths (`bilm.backend.torch.layer_calls.inside_positions_scan`): the portable code's outputs and final states, as
many input halves as positions inside, and the layer's call taking it where no gradient is recorded."""
from backend_processes import json_result, run_on_backend
from helpers import LSTM_ARRAYS

INSIDE_POSITIONS_AGREE = """
import json
import numpy as np
import torch
from bilm.backend import backend_module
from bilm.backend.torch import layer_calls
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.ops.lstm_scan import lstm_scan

batch = 3
""" + LSTM_ARRAYS + """
steps = backend_module("core").lstm_steps
made = []  # the rows each input half was made for: the rows a token_index picks from, or every position
scan = layer_calls.lstm_scan
layer_calls.lstm_scan = lambda rows, *args, **kwargs: made.append(
    rows.shape[1] if args[10] is not None else rows.shape[0] * rows.shape[1]) or scan(rows, *args, **kwargs)
worst, zeros_beyond, counted, cases = 0.0, True, True, 0
with torch.no_grad():
    for lengths in ([6, 3, 0], [6, 6, 2], [0, 0, 0], [6, 6, 6]):  # the last: no padding
        lengths = np.array(lengths, np.int32)
        for go_backwards in (False, True):
            for projection in (True, False):
                own, h = layer_arrays(projection)
                args = [torch.as_tensor(x) for x in (inputs, lengths, c0, h)] + [
                    None if k is None else torch.as_tensor(k) for k in own]
                clips = (0.8, 0.5 if projection else None, go_backwards)
                want = lstm_scan(*args, *clips, recurrence=steps)
                got = layer_calls.inside_positions_scan(*args, *clips, None, "float32", steps)
                worst = max([worst] + [float((a - b).abs().max()) for a, b in zip(got, want)])
                zeros_beyond = zeros_beyond and all(not bool(got[0][row, n:].any()) for row, n in enumerate(lengths))
                counted = counted and int(made[-1]) == int(lengths.sum())
                cases += 1

    # The layer's call takes it where no gradient is recorded; in training, or with gradients, the portable code.
    layer = ProjectedLSTM(units, out, cell_clip=0.8, proj_clip=0.5)
    lengths = np.array([6, 3, 1], np.int32)
    made.clear()
    inference = layer(inputs, lengths, training=False)[0]
    made_inference = [int(n) for n in made]
    want = lstm_scan(torch.as_tensor(inputs), torch.as_tensor(lengths), torch.zeros(batch, units),
                     torch.zeros(batch, out), *[layer.input_kernel, layer.recurrent_kernel, layer.bias,
                                                layer.projection_kernel], 0.8, 0.5)[0]
    layer_error = float((inference - want).abs().max())
made.clear()
layer(inputs, lengths, training=False)
made_with_gradients = [int(n) for n in made]
print(json.dumps({"worst": worst, "zeros_beyond": zeros_beyond, "counted": counted, "cases": cases,
                  "made_inference": made_inference, "made_with_gradients": made_with_gradients,
                  "layer_error": layer_error}))
"""


def test_where_no_gradient_is_recorded_pytorch_makes_the_input_half_of_the_positions_inside_alone():
    """Rows of every length (none at all, and a batch without padding, included), both directions, with and
    without a projection: the portable scan's outputs and final states to float32 round-off, zeros past each
    row's length, one input half a position inside; a layer's call under `torch.no_grad` takes it (10 positions
    inside), with gradients it does not."""
    result = json_result(run_on_backend("torch", INSIDE_POSITIONS_AGREE))
    assert result["cases"] == 16 and result["zeros_beyond"] and result["counted"], result
    assert result["worst"] < 1e-6, result
    assert result["made_inference"] == [10] and result["layer_error"] < 1e-6, result
    assert result["made_with_gradients"] == [18], result
