"""PyTorch's char CNN where gradients are recorded (`bilm.backend.torch.layer_calls.char_cnn`: over the columns the
rows' characters reach, max-pooled by `torch.max`, whose gradient goes to one window) gives the portable code's
values and gradients (torch autograd of `portable_features` over every column), rows ending in a run of padding
chars included, whose maxima tie; without gradients (inference on a CPU) bilm's native table lookups give the
portable values to float32 round-off, each token the same bytes alone as beside others."""
import numpy as np
import pytest

from backend_processes import json_result, run_on_backend

pytestmark = pytest.mark.slow  # PyTorch in a process of its own

CHECK = '''
import json
import numpy as np
import torch
from bilm.backend.torch.layer_calls import char_cnn
from bilm.layers.char_cnn import CharCNNEncoder
from bilm.ops.char_convolutions_portable import needed_columns

rng = np.random.default_rng(0)
layer = CharCNNEncoder(262, 4, [(1, 8), (2, 8), (3, 16), (5, 16)], activation="tanh")
layer.build((None, None, 20))
ids = rng.integers(1, 261, size=(40, 20))
lengths = rng.integers(1, 8, size=40)
ids[np.arange(20)[None, :] >= lengths[:, None]] = 260  # each row ends in a run of one padding char
ids[-3:] = 0  # padding rows: every window ties
ids = torch.tensor(ids, dtype=torch.int32)
weights = torch.tensor(rng.normal(size=(40, layer.n_filters)), dtype=torch.float32)
variables = [layer.char_embedding, *layer.kernels]

out = {"columns": needed_columns(ids.numpy(), 5)}
for name, features in (("portable", layer.portable_features), ("own", lambda ids: char_cnn(layer, ids))):
    for variable in variables:
        variable.value.grad = None
    value = features(ids)
    (weights * value).sum().backward()
    out[name] = {"features": value.detach().numpy().tolist(),
                 "gradients": [variable.value.grad.numpy().tolist() for variable in variables]}
with torch.no_grad():
    inference = char_cnn(layer, ids).numpy()
    out["inference"] = inference.tolist()
    out["inference_portable"] = layer.portable_features(ids).numpy().tolist()
    out["inference_alone_identical"] = all(char_cnn(layer, ids[i:i + 1]).numpy().tobytes() == inference[i].tobytes()
                                           for i in (0, 17, 39))
    # New weights (Keras's assign, in place) are what the next call computes with, not the tables of the old ones.
    layer.kernels[3].assign(layer.kernels[3].value * 2.0)
    out["after_assign"] = char_cnn(layer, ids).numpy().tolist()
    out["after_assign_portable"] = layer.portable_features(ids).numpy().tolist()
print(json.dumps(out))
'''


def test_the_char_cnn_gives_the_portable_values_and_gradients_and_at_inference_its_values():
    report = json_result(run_on_backend("torch", CHECK))
    assert report["columns"] < 20  # columns trimmed
    np.testing.assert_allclose(report["inference"], report["inference_portable"], rtol=1e-5, atol=1e-6)
    assert report["inference_alone_identical"]
    np.testing.assert_allclose(report["after_assign"], report["after_assign_portable"], rtol=1e-5, atol=1e-6)
    assert np.abs(np.array(report["after_assign"]) - np.array(report["inference"])).max() > 1e-2
    want, got = report["portable"], report["own"]
    np.testing.assert_allclose(got["features"], want["features"], rtol=1e-5, atol=1e-6)
    # Tied windows (the padding run) are identical: one of them takes what `torch.amax` shares among them.
    assert np.abs(np.array(want["gradients"][0])[260]).max() > 1e-2  # the padding char's row is reached by ties
    for got_gradient, want_gradient in zip(got["gradients"], want["gradients"], strict=True):
        np.testing.assert_allclose(got_gradient, want_gradient, rtol=1e-4, atol=1e-5)
