"""AllenNLP's `Elmo` and `batch_to_ids` on bilm: its documented usage, with only the import changed, gives what
AllenNLP 2.10 computes (scalar mixes of the biLM's layers between `<S>` and `</S>`, its masked layer norm, the
boundaries removed), against the NumPy reference of the biLM; on PyTorch it trains inside a torch module."""
import json

import keras
import numpy as np
import pytest

import numpy_reference as R
from backend_processes import json_result, run_on_backend
from bilm.compat.allennlp import Elmo, batch_to_ids
from bilm.errors import UserError

SENTENCES = [["First", "sentence", "."], ["Another", "."], ["Ελληνικά", "words", "and", "more", "too"], ["x"]]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("allennlp")
    options = R.make_options(lstm_dim=16, projection_dim=8, filters=((1, 8), (2, 8), (3, 16)), char_dim=4,
                             max_chars=50)
    (folder / "options.json").write_text(json.dumps(options))
    R.write_random_weights(str(folder / "weights.hdf5"), options, seed=5, scale=0.25)
    return str(folder / "options.json"), str(folder / "weights.hdf5"), options


def allennlp_reference(weight_file, options, sentences, s=None, do_layer_norm=False, keep=False):
    """AllenNLP's `Elmo.forward` on the NumPy biLM: `(representation (B, T, 2P), mask (B, T))`."""
    ids = R.char_ids(sentences, 50)  # (B, T + 2, 50), <S> and </S> around each sentence
    layers = R.bilm_forward(R.read_weights(weight_file), options, ids)["layers"]
    mask = (ids > 0).any(-1)
    s = np.zeros(len(layers)) if s is None else np.asarray(s, np.float64)
    weights = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    if do_layer_norm:
        count = mask.sum() * layers[0].shape[-1]

        def norm(tensor):
            masked = tensor * mask[..., None]
            mean = masked.sum() / count
            variance = (((masked - mean) * mask[..., None]) ** 2).sum() / count
            return (tensor - mean) / np.sqrt(variance + 1e-13)
        layers = [norm(layer) for layer in layers]
    mixed = sum(w * layer for w, layer in zip(weights, layers))
    if keep:
        return mixed, mask
    lengths = mask.sum(1) - 2
    inner = np.zeros_like(mixed[:, 2:])
    for row, length in enumerate(lengths):
        inner[row, :length] = mixed[row, 1:length + 1]
    return inner, np.arange(inner.shape[1])[None, :] < lengths[:, None]


def test_batch_to_ids_gives_allennlps_character_ids():
    ids = keras.ops.convert_to_numpy(batch_to_ids([["a", "Hi"], ["<S>"]]))
    assert ids.shape == (2, 2, 50) and ids.dtype == np.int64
    # Begin-of-word 258, the bytes, end-of-word 259, padding 260; all shifted by one. <S> is the boundary's row.
    np.testing.assert_array_equal(ids[0, 0, :4], [259, 98, 260, 261])
    np.testing.assert_array_equal(ids[0, 1, :5], [259, 73, 106, 260, 261])
    np.testing.assert_array_equal(ids[1, 0, :4], [259, 257, 260, 261])
    assert np.all(ids[1, 1] == 0) and np.all(ids[0, :, 5:] == 261)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(batch_to_ids(SENTENCES)),
                                  np.where(np.arange(5)[None, :, None] < np.array([3, 2, 5, 1])[:, None, None],
                                           R.char_ids(SENTENCES, 50)[:, 1:-1], 0))


def test_elmo_gives_allennlps_representations_and_mask(model):
    options_file, weight_file, options = model
    elmo = Elmo(options_file, weight_file, num_output_representations=2, dropout=0)
    output = elmo(batch_to_ids(SENTENCES))
    expected, mask = allennlp_reference(weight_file, options, SENTENCES)
    assert len(output["elmo_representations"]) == 2 and elmo.get_output_dim() == 16
    for representation in output["elmo_representations"]:
        np.testing.assert_allclose(keras.ops.convert_to_numpy(representation), expected, atol=1e-6)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(output["mask"]), mask)


@pytest.mark.parametrize("keep", [False, True])
def test_layer_norm_fixed_mix_and_boundaries_as_allennlp(model, keep):
    options_file, weight_file, options = model
    s = [1.0, -1.0, 0.5]
    elmo = Elmo(options_file, weight_file, 1, do_layer_norm=True, dropout=0.3, keep_sentence_boundaries=keep,
                scalar_mix_parameters=s)
    output = elmo(batch_to_ids(SENTENCES))  # training=None outside a torch module: no dropout
    expected, mask = allennlp_reference(weight_file, options, SENTENCES, s=s, do_layer_norm=True, keep=keep)
    representation = keras.ops.convert_to_numpy(output["elmo_representations"][0])
    assert representation.shape == (4, 7 if keep else 5, 16)
    np.testing.assert_allclose(representation, expected, atol=1e-5)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(output["mask"]), mask)
    # Fixed parameters do not train; dropout acts in training only.
    assert elmo.trainable_weights == []
    dropped = keras.ops.convert_to_numpy(elmo(batch_to_ids(SENTENCES), training=True)["elmo_representations"][0])
    assert 0.1 < np.mean(dropped[mask] == 0) < 0.6


def test_cached_words_more_axes_and_what_is_refused(model):
    options_file, weight_file, options = model
    vocabulary = ["<pad>", "First", "sentence", ".", "Another"]
    elmo = Elmo(options_file, weight_file, 1, dropout=0, vocab_to_cache=vocabulary)
    words = np.array([[1, 2, 3], [4, 3, 0]])
    by_words = elmo(batch_to_ids(SENTENCES[:2]), word_inputs=words)
    by_characters = elmo(batch_to_ids(SENTENCES[:2]))
    np.testing.assert_allclose(*(keras.ops.convert_to_numpy(out["elmo_representations"][0])
                                 for out in (by_words, by_characters)), atol=1e-6)
    # (batch, n, timesteps, 50): each (timesteps, 50) a sentence, the leading axes kept.
    ids = keras.ops.convert_to_numpy(batch_to_ids(SENTENCES))
    nested = elmo(ids.reshape(2, 2, 5, 50))
    assert tuple(nested["mask"].shape) == (2, 2, 5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(nested["elmo_representations"][0]).reshape(4, 5, 16),
                               allennlp_reference(weight_file, options, SENTENCES)[0], atol=1e-6)
    with pytest.raises(UserError, match="module="):
        Elmo(None, None, 1, module=object())
    with pytest.raises(UserError, match="the inputs have 20 character ids a token and the model reads 50"):
        elmo(ids[..., :20])


@pytest.mark.slow
def test_a_keras_model_with_elmo_trains_its_mix_and_not_the_bilm(model):
    options_file, weight_file, _ = model
    ids = keras.Input((None, 50), dtype="int32")
    elmo = Elmo(options_file, weight_file, 1, dropout=0.1)
    representation = elmo(ids)["elmo_representations"][0]
    classifier = keras.Model(ids, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(representation)))
    classifier.compile(optimizer=keras.optimizers.Adam(0.1),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = {v.path: keras.ops.convert_to_numpy(v).copy() for v in elmo.weights}
    classifier.fit(keras.ops.convert_to_numpy(batch_to_ids(SENTENCES)).astype(np.int32), np.array([0, 1, 0, 1]),
                   epochs=3, verbose=0)
    changed = {v.path for v in elmo.weights if not np.array_equal(keras.ops.convert_to_numpy(v), before[v.path])}
    assert {path for path in changed if "seed" not in path} == {"scalar_mix_0/scalar_parameters",
                                                                "scalar_mix_0/gamma"}


KERAS_CLASSIFIER = """
import json, sys
import keras
import numpy as np
from bilm.compat.allennlp import Elmo, batch_to_ids
from test_allennlp_elmo import SENTENCES

options_file, weight_file = sys.argv[1:3]
ids = keras.ops.convert_to_numpy(batch_to_ids(SENTENCES)).astype(np.int32)
report = {}
for requires_grad in (False, True):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, 50), dtype="int32")  # built on symbolic sizes
    elmo = Elmo(options_file, weight_file, 1, dropout=0, requires_grad=requires_grad)
    representation = elmo(inputs)["elmo_representations"][0]
    dense = keras.layers.Dense(2)
    classifier = keras.Model(inputs, dense(keras.layers.GlobalAveragePooling1D()(representation)))
    kernel = np.random.default_rng(1).normal(0, 0.5, (elmo.get_output_dim(), 2)).astype(np.float32)
    dense.set_weights([kernel, np.zeros(2, np.float32)])  # the same start on every backend
    classifier.compile(optimizer=keras.optimizers.SGD(0.5),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = {v.path: keras.ops.convert_to_numpy(v).copy() for v in elmo.weights}
    history = classifier.fit(ids, np.array([0, 1, 0, 1]), batch_size=4, epochs=3, shuffle=False, verbose=0)
    report[str(requires_grad)] = {
        "losses": history.history["loss"],
        "changed": sorted(v.path for v in elmo.weights if "seed" not in v.path
                          and not np.array_equal(keras.ops.convert_to_numpy(v), before[v.path]))}
print(json.dumps(report))
"""


@pytest.mark.slow
def test_a_keras_model_with_elmo_builds_and_trains_alike_on_jax_and_pytorch_the_bilm_only_with_requires_grad(model):
    """The Keras classifier on JAX and PyTorch (TensorFlow's: the test above), built on symbolic sizes: frozen, only
    the mix trains; with `requires_grad` the biLM too (gradients through its training paths: JAX's inference
    recurrence has none), to the same losses on both."""
    options_file, weight_file, _ = model
    reports = {backend: json_result(run_on_backend(
        backend, KERAS_CLASSIFIER, options_file, weight_file,
        environment={"PYTHONPATH": str(__import__("pathlib").Path(__file__).parent)})) for backend in ("jax", "torch")}
    for backend, report in reports.items():
        frozen, tuned = report["False"], report["True"]
        assert {path.rsplit("/", 1)[-1] for path in frozen["changed"]} == {"scalar_parameters", "gamma"}, backend
        assert len(tuned["changed"]) > 20 and set(frozen["changed"]) < set(tuned["changed"]), backend
    for variant in ("False", "True"):
        np.testing.assert_allclose(reports["jax"][variant]["losses"], reports["torch"][variant]["losses"],
                                   rtol=1e-4, err_msg=f"requires_grad={variant}")
    assert reports["jax"]["True"]["losses"] != reports["jax"]["False"]["losses"]


TORCH_CLASSIFIER = """
import io, json, sys
import numpy as np
import torch
from bilm.compat.allennlp import Elmo, batch_to_ids
from test_allennlp_elmo import SENTENCES, allennlp_reference

options_file, weight_file = sys.argv[1:3]
options = json.load(open(options_file))
ids = batch_to_ids(SENTENCES)


class Classifier(torch.nn.Module):
    def __init__(self, requires_grad=False):
        super().__init__()
        self.elmo = Elmo(options_file, weight_file, 1, requires_grad=requires_grad)
        self.out = torch.nn.Linear(self.elmo.get_output_dim(), 2)

    def forward(self, ids):
        output = self.elmo(ids)
        mask = output["mask"].float().unsqueeze(-1)
        return self.out((output["elmo_representations"][0] * mask).sum(1) / mask.sum(1))


def train(model, steps=5):
    model(ids)  # builds the layer
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.05)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids), torch.tensor([0, 1, 0, 1]))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    changed = sorted(name for name, p in model.named_parameters() if not torch.equal(p, before[name]))
    return changed, losses


frozen = Classifier()
changed, losses = train(frozen)
frozen.eval()
first, again = frozen(ids), frozen(ids)
frozen.train()
in_training = frozen(ids)
saved = io.BytesIO()
torch.save(frozen.state_dict(), saved)
saved.seek(0)
copy = Classifier()
copy(ids)
copy.load_state_dict(torch.load(saved))
copy.eval()
tuned_changed, _ = train(Classifier(requires_grad=True), steps=2)
plain = Elmo(options_file, weight_file, 1, dropout=0)(ids)
expected, mask = allennlp_reference(weight_file, options, SENTENCES)
print(json.dumps({
    "ids": [type(ids).__name__, str(ids.dtype)], "changed": changed, "losses": losses,
    "tuned_changed": tuned_changed, "is_module": isinstance(frozen.elmo, torch.nn.Module),
    "eval_deterministic": bool(torch.equal(first, again)), "dropout_in_training": not torch.equal(first, in_training),
    "round_trip": bool(torch.equal(copy(ids), first)),
    "deviation": float(np.abs(plain["elmo_representations"][0].detach().numpy() - expected).max()),
    "mask": bool(np.array_equal(plain["mask"].numpy(), mask))}))
"""


@pytest.mark.slow
def test_on_pytorch_elmo_trains_inside_a_torch_module(model):
    options_file, weight_file, _ = model
    result = json_result(run_on_backend("torch", TORCH_CLASSIFIER, options_file, weight_file,
                                        environment={"PYTHONPATH": str(__import__("pathlib").Path(__file__).parent)}))
    assert result["ids"] == ["Tensor", "torch.int64"] and result["is_module"]
    assert result["deviation"] < 1e-6 and result["mask"]
    # The scalar mix and the classifier train; the biLM only with requires_grad.
    assert set(result["changed"]) == {"elmo._torch_params.scalar_mix_0/scalar_parameters",
                                      "elmo._torch_params.scalar_mix_0/gamma", "out.weight", "out.bias"}
    assert len(result["tuned_changed"]) > 20 and set(result["changed"]) < set(result["tuned_changed"])
    assert result["eval_deterministic"] and result["dropout_in_training"] and result["round_trip"]
