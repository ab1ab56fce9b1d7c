"""simple_elmo's `ElmoModel` on bilm: its documented usage, with only the import changed, gives what simple_elmo
computes (stateful chunks after a warm-up, zero padding, normalised averages), against the NumPy reference."""
import json
import zipfile

import numpy as np
import pytest

import numpy_reference as R
from backend_processes import json_result, run_on_backend
from bilm.compat.simple_elmo import ElmoModel
from bilm.errors import UserError

SENTENCES = [["The", "cat", "sat", "down"], ["Hi"], ["Ελληνικά", "words", "too"], ["Back", "again"], ["x"]]
MAX_BATCH_SIZE = 2


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """An NLPL-style model: `options.json` and `model.hdf5` in a folder, and the same as a zip."""
    folder = tmp_path_factory.mktemp("simple_elmo") / "209"
    folder.mkdir()
    options = R.make_options(lstm_dim=16, projection_dim=8, filters=((1, 8), (2, 8), (3, 16)), char_dim=4,
                             max_chars=12)
    (folder / "options.json").write_text(json.dumps(options))
    R.write_random_weights(str(folder / "model.hdf5"), options, seed=3, scale=0.25)
    archive = folder.parent / "209.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in ("options.json", "model.hdf5"):
            z.write(folder / name, name)
    return folder, archive, options


def _reference(folder, options, texts, warmup):
    """simple_elmo's computation on the NumPy biLM: `lm_embeddings` of each chunk of `MAX_BATCH_SIZE` texts,
    stateful from zero states, after the first chunk once with `warmup`."""
    weights = R.read_weights(str(folder / "model.hdf5"))
    chunks = [texts[i:i + MAX_BATCH_SIZE] for i in range(0, len(texts), MAX_BATCH_SIZE)]
    batches = [R.char_ids(chunk, options["char_cnn"]["max_characters_per_token"]) for chunk in chunks]
    results, _ = R.run_stateful(weights, options, ([batches[0]] if warmup else []) + batches, MAX_BATCH_SIZE)
    return [result["lm_embeddings"] for result in results[1 if warmup else 0:]]


@pytest.mark.parametrize("warmup", [True, False])
def test_the_documented_usage_gives_simple_elmos_vectors(model_folder, warmup):
    folder, archive, options = model_folder
    model = ElmoModel()
    assert model.load(str(folder), max_batch_size=MAX_BATCH_SIZE) == "The model is now loaded."
    assert (model.vector_size, model.n_layers, model.max_chars) == (16, 3, 12)
    chunks = _reference(folder, options, SENTENCES, warmup)
    longest = max(len(s) for s in SENTENCES)
    want_all = np.zeros((len(SENTENCES), 3, longest, 16))
    for index, lm_embeddings in enumerate(chunks):
        rows = slice(index * MAX_BATCH_SIZE, index * MAX_BATCH_SIZE + len(lm_embeddings))
        want_all[rows, :, :lm_embeddings.shape[2]] = lm_embeddings
    got = {layers: model.get_elmo_vectors(SENTENCES, warmup=warmup, layers=layers)
           for layers in ("average", "top", "all")}
    assert got["average"].shape == (5, longest, 16) and got["average"].dtype == np.float64
    np.testing.assert_allclose(got["all"], want_all, atol=1e-5)
    np.testing.assert_allclose(got["top"], want_all[:, -1], atol=1e-5)
    np.testing.assert_allclose(got["average"], want_all.mean(axis=1), atol=1e-5)
    # Past each sentence's end: zeros.
    assert not got["average"][1, 1:].any() and np.abs(got["average"][1, 0]).max() > 0.01
    # Each sentence's vectors summed, of unit length.
    averages = model.get_elmo_vector_average(SENTENCES, warmup=warmup)
    want = want_all.mean(axis=1).sum(axis=1)
    np.testing.assert_allclose(averages, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-5)
    every_layer = model.get_elmo_vector_average(SENTENCES, warmup=warmup, layers="all")
    want = want_all.sum(axis=2)
    np.testing.assert_allclose(every_layer, want / np.linalg.norm(want, axis=(1, 2), keepdims=True), atol=1e-5)
    # The warm-up changes the vectors (the LSTM states it leaves), and a second call repeats the first.
    np.testing.assert_array_equal(model.get_elmo_vectors(SENTENCES, warmup=warmup), got["average"])
    if warmup:
        assert np.abs(model.get_elmo_vectors(SENTENCES, warmup=False) - got["average"]).max() > 1e-4


def test_a_zip_loads_as_its_folder(model_folder, tmp_path, monkeypatch):
    folder, archive, _ = model_folder
    monkeypatch.setenv("BILM_CACHE", str(tmp_path / "cache"))
    from_folder, from_zip = ElmoModel(), ElmoModel()
    from_folder.load(str(folder), max_batch_size=MAX_BATCH_SIZE)
    from_zip.load(str(archive), max_batch_size=MAX_BATCH_SIZE)
    np.testing.assert_array_equal(from_zip.get_elmo_vectors(SENTENCES), from_folder.get_elmo_vectors(SENTENCES))


def test_what_bilm_does_not_provide_is_one_clear_error(model_folder):
    folder, _, _ = model_folder
    model = ElmoModel()
    with pytest.raises(UserError, match=r"call load\(path\) before"):
        model.get_elmo_vectors(SENTENCES)
    with pytest.raises(UserError, match=r"full=True\) loads a training checkpoint's softmax"):
        model.load(str(folder), full=True)
    with pytest.raises(FileNotFoundError):
        model.load(str(folder / "missing"))
    model.load(str(folder), max_batch_size=MAX_BATCH_SIZE)
    with pytest.raises(UserError, match=r"layers must be one of 'average', 'top', 'all'. Received: layers='mean'"):
        model.get_elmo_vectors(SENTENCES, layers="mean")
    with pytest.raises(UserError, match=r"session= is a TensorFlow 1 session"):
        model.get_elmo_vector_average(SENTENCES, session=object())
    with pytest.raises(UserError, match=r"each a list of words"):
        model.get_elmo_vectors(["The cat sat"])
    with pytest.raises(UserError, match=r"get_elmo_substitutes needs the language model's softmax"):
        model.get_elmo_substitutes(SENTENCES)


ON_BACKEND = '''
import json, sys
import numpy as np
from bilm.compat.simple_elmo import ElmoModel

model = ElmoModel()
model.load(sys.argv[1], max_batch_size=2)
texts = json.loads(sys.argv[2])
print(json.dumps({"vectors": model.get_elmo_vectors(texts).tolist(),
                  "averages": model.get_elmo_vector_average(texts, layers="top").tolist(),
                  "tensorflow_imported": "tensorflow" in sys.modules}))
'''


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_it_runs_on_jax_and_pytorch_alike(model_folder, backend):
    folder, _, _ = model_folder
    model = ElmoModel()
    model.load(str(folder), max_batch_size=MAX_BATCH_SIZE)
    report = json_result(run_on_backend(backend, ON_BACKEND, folder, json.dumps(SENTENCES)))
    assert not report["tensorflow_imported"]
    np.testing.assert_allclose(report["vectors"], model.get_elmo_vectors(SENTENCES), atol=1e-5)
    np.testing.assert_allclose(report["averages"], model.get_elmo_vector_average(SENTENCES, layers="top"),
                               atol=1e-5)
