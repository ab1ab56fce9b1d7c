"""On Keras's NumPy backend the char CNN runs bilm's native table lookups (`bilm.backend.numpy.layer_calls`): the
layer's call gives their bytes, and the portable convolutions' values to float32 round-off."""
import pytest

from backend_processes import json_result, run_on_backend

pytestmark = pytest.mark.slow  # Keras's NumPy backend in a process of its own

CHECK = '''
import json
import numpy as np
from bilm.backend.numpy.layer_calls import native_char_convolutions
from bilm.layers.char_cnn import CharCNNEncoder
from bilm.ops.char_convolutions_portable import portable_char_convolutions

rng = np.random.default_rng(0)
layer = CharCNNEncoder(262, 4, [(1, 8), (2, 8), (3, 16), (5, 16)], activation="tanh")
layer.build((None, None, 12))
ids = rng.integers(1, 261, size=(1, 30, 12))
called = np.asarray(layer(ids, training=False))[0]
features = {name: np.asarray(layer.portable_features(ids[0], convolutions=convolutions))
            for name, convolutions in (("native", native_char_convolutions), ("portable", portable_char_convolutions))}
print(json.dumps({"identical": {name: called.tobytes() == value.tobytes() for name, value in features.items()},
                  "deviation": float(np.abs(features["native"] - features["portable"]).max())}))
'''


def test_the_numpy_backends_char_cnn_runs_the_native_table_lookups():
    report = json_result(run_on_backend("numpy", CHECK))
    assert report["identical"] == {"native": True, "portable": False}
    assert report["deviation"] < 1e-6
