"""`ELMoEmbedding` inside a Keras model on every backend: a small tagger (ids in) trains to the same loss curve on
TensorFlow, JAX and PyTorch (the last two without TensorFlow), and its `.keras` file loads back to the same
predictions; what only TensorFlow does says so in one line elsewhere."""
import json

import numpy as np
import pytest

import numpy_reference as R
from backend_processes import BACKENDS, json_result, run_on_backend

SENTENCES = [["The", "cat", "sat", "."], ["Hi"], ["a", "b", "a", "b", "a"], ["naïve", "中文"]]

TAGGER = '''
import json, sys
import numpy as np
import keras
import bilm

folder = sys.argv[1]
backend = keras.backend.backend()
data = np.load(folder + "/data.npz")
reports = {}
for trainable_bilm in (False, True):  # the biLM frozen (the default), then fine-tuned
    layer = bilm.ELMoEmbedding.from_files(folder + "/options.json", folder + "/weights.hdf5", start="zeros",
                                          trainable_bilm=trainable_bilm)
    ids = keras.Input(shape=(None, 7), dtype="int32")
    tagger = keras.layers.Dense(3, activation="softmax")
    model = keras.Model(ids, tagger(layer(ids)))
    tagger.set_weights([data["kernel"], data["bias"]])  # the same start on every backend
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    kernel = lambda: keras.ops.convert_to_numpy(layer.network.get_layer("forward_lstm_1").recurrent_kernel)[:2]
    start = kernel()
    history = model.fit(data["ids"], data["tags"], epochs=6, batch_size=len(data["ids"]), shuffle=False, verbose=0)
    path = folder + f"/tagger-{backend}-{trainable_bilm}.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    before, after = (keras.ops.convert_to_numpy(m.predict(data["ids"], verbose=0)) for m in (model, loaded))
    reports[str(trainable_bilm)] = {
        "losses": [float(x) for x in history.history["loss"]],
        "reloaded_deviation": float(np.abs(before - after).max()),
        "mix_weights": [float(x) for x in keras.ops.convert_to_numpy(layer.mix.W)],
        "bilm_kernel": kernel().tolist(), "bilm_kernel_moved": float(np.abs(kernel() - start).max())}
print(json.dumps({**reports, "tensorflow_imported": "tensorflow" in sys.modules}))
'''


@pytest.fixture(scope="module")
def tagger_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tagger")
    options = R.make_options()
    (folder / "options.json").write_text(json.dumps(options))
    R.write_random_weights(str(folder / "weights.hdf5"), options, seed=4)
    ids = R.char_ids(SENTENCES, 7)
    rng = np.random.default_rng(5)
    tags = rng.integers(0, 3, size=(len(SENTENCES), ids.shape[1] - 2))
    np.savez(folder / "data.npz", ids=ids, tags=tags, kernel=rng.normal(0, 0.3, (12, 3)).astype(np.float32),
             bias=np.zeros(3, np.float32))
    return folder


@pytest.fixture(scope="module")
def tagger_reports(tagger_data):
    """Each backend's run of `TAGGER`, one process each."""
    return {backend: json_result(run_on_backend(backend, TAGGER, tagger_data)) for backend in BACKENDS}


@pytest.mark.slow
def test_a_tagger_trains_alike_and_reloads_on_every_backend(tagger_reports):
    reference = tagger_reports["tensorflow"]["False"]
    assert reference["losses"][-1] < reference["losses"][0] * 0.9  # it learns
    for backend, report in tagger_reports.items():
        np.testing.assert_allclose(report["False"]["losses"], reference["losses"], rtol=1e-4, err_msg=backend)
        np.testing.assert_allclose(report["False"]["mix_weights"], reference["mix_weights"], atol=1e-4)
        assert report["False"]["reloaded_deviation"] < 1e-6, backend
        assert report["False"]["bilm_kernel_moved"] == 0, backend  # frozen
        assert report["tensorflow_imported"] == (backend == "tensorflow")


NEEDS_TENSORFLOW = '''
import json, sys
import bilm
from bilm.errors import UserError

folder = sys.argv[1]
messages = {}
layer = bilm.ELMoEmbedding.from_files(folder + "/options.json", folder + "/weights.hdf5", start="zeros")
attempts = {
    "export_saved_model": lambda: bilm.export_saved_model(folder + "/options.json", folder + "/weights.hdf5",
                                                          folder + "/saved"),
    "text inputs": lambda: layer(__import__("numpy").array([["a", "b"]])),
    "int8 kernels": lambda: bilm.BidirectionalLanguageModel(folder + "/options.json", folder + "/weights.hdf5",
                                                            kernel_dtype="int8"),
}
for name, attempt in attempts.items():
    try:
        attempt()
        messages[name] = None
    except UserError as error:
        messages[name] = str(error)
print(json.dumps(messages))
'''


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_what_needs_tensorflow_says_so_in_one_line(tagger_data, backend):
    messages = json_result(run_on_backend(backend, NEEDS_TENSORFLOW, tagger_data))
    for name, message in messages.items():
        assert message is not None, f"{name} ran on {backend}"
        assert "needs TensorFlow" in message and f"KERAS_BACKEND={backend}" in message and "\n" not in message


FROZEN_IN_A_TRAINING_STEP = '''
import collections, json, sys
import numpy as np
import keras
import torch
import bilm
from bilm.ops.native import portable_kernels

folder = sys.argv[1]
ids = torch.tensor(np.load(folder + "/data.npz")["ids"])
calls = collections.Counter()
for name in ("char_max_pooled", "matmul", "steps_or_none"):  # the char CNN's tables, products, recurrence
    native = getattr(portable_kernels, name)
    setattr(portable_kernels, name, lambda *args, _name=name, _native=native, **kwargs:
            calls.update([_name]) or _native(*args, **kwargs))
report = {}
for trainable_bilm in (False, True):
    keras.utils.set_random_seed(0)
    layer = bilm.ELMoEmbedding.from_files(folder + "/options.json", folder + "/weights.hdf5", start="zeros",
                                          trainable_bilm=trainable_bilm)
    inputs = keras.Input(shape=(None, 7), dtype="int32")
    model = keras.Model(inputs, keras.layers.Dense(3)(layer(inputs)))
    calls.clear()
    outputs = model(ids, training=True)  # a training step's forward pass, gradients recorded
    weights = [w for w in model.trainable_weights if "elmo_mix" in w.path or "lstm" in w.path]
    gradients = torch.autograd.grad((outputs ** 2).sum(), [w.value for w in weights])
    report[str(trainable_bilm)] = {
        "calls": dict(calls), "outputs": outputs.detach().numpy().tolist(),
        "gradients": {"/".join(w.path.split("/")[-2:]): g.numpy().tolist() for w, g in zip(weights, gradients)}}
print(json.dumps(report))
'''


@pytest.mark.slow  # a PyTorch process
def test_a_frozen_elmo_in_a_pytorch_training_step_runs_bilms_native_paths_and_a_trainable_one_its_gradients(
        tagger_data):
    """In a PyTorch training step (gradients recorded) a frozen biLM records none: its char CNN, products and
    recurrence run bilm's native code, as embedding does, and the mix's gradients equal those through the portable
    code, which a trainable biLM runs, its LSTM kernels getting gradients."""
    report = json_result(run_on_backend("torch", FROZEN_IN_A_TRAINING_STEP, tagger_data))
    frozen, trainable = report["False"], report["True"]
    assert set(frozen["calls"]) == {"char_max_pooled", "matmul", "steps_or_none"}, frozen["calls"]
    assert trainable["calls"] == {}, trainable["calls"]
    np.testing.assert_allclose(frozen["outputs"], trainable["outputs"], rtol=1e-5, atol=1e-6)
    for path, gradient in frozen["gradients"].items():
        np.testing.assert_allclose(gradient, trainable["gradients"][path], rtol=1e-4, atol=1e-6, err_msg=path)
    lstm = [np.abs(g).max() for path, g in trainable["gradients"].items() if "lstm" in path]
    assert lstm and min(lstm) > 0 and set(frozen["gradients"]) < set(trainable["gradients"])


@pytest.mark.slow
def test_a_tagger_that_fine_tunes_its_bilm_trains_alike_on_every_backend(tagger_reports):
    """`trainable_bilm=True` in `fit`: the biLM takes its training paths, which gradients go through on every
    backend (JAX's inference recurrence, an XLA custom call, has none), to the same losses and weights."""
    reference = tagger_reports["tensorflow"]["True"]
    assert reference["losses"][-1] < reference["losses"][0] * 0.9
    for backend, report in tagger_reports.items():
        tuned = report["True"]
        np.testing.assert_allclose(tuned["losses"], reference["losses"], rtol=1e-4, err_msg=backend)
        moved = tuned["bilm_kernel_moved"]
        np.testing.assert_allclose(tuned["bilm_kernel"], reference["bilm_kernel"], atol=moved * 1e-2, err_msg=backend)
        assert moved > 1e-2, (backend, moved)
        assert tuned["reloaded_deviation"] < 1e-6, backend
