"""The portable network on every backend: JAX and PyTorch (without TensorFlow) and TensorFlow's own run of the
portable code give the NumPy reference's activations, for a character model (stateless and stateful, with its
token cache), a token model and an ELMoForManyLangs model, and bfloat16 kernels (without the cache) stay within
their tolerance."""
import json

import numpy as np
import pytest

import efml_models as M
import numpy_reference as R
from backend_processes import json_result, run_on_backend
from bilm.ops.kernel_dtypes import BFLOAT16_INFERENCE_TOLERANCE

# Each test runs JAX (or PyTorch) in processes of their own: over the fast tier's 3 s.
pytestmark = pytest.mark.slow

SENTENCES = [["The", "cat", "sat", "."], ["Hi"], ["naïve", "中文", "tokenlongerthanthelimit", "🙂"], []]
MAX_CHARS = 7

# Runs in the backend's process: every model's activations into an .npz file.
EMBED = '''
import json, sys
import numpy as np
import keras
import bilm
from bilm.utils.backend import PORTABLE

folder, portable = sys.argv[1], sys.argv[2] == "portable"
paths = json.load(open(folder + "/paths.json"))
arrays = {}
out = lambda x: keras.ops.convert_to_numpy(x)
with PORTABLE.on() if portable else __import__("contextlib").nullcontext():
    char_ids = np.load(folder + "/inputs.npz")
    model = bilm.BidirectionalLanguageModel(paths["options"], paths["weights"], stateful=False, start="zeros")
    arrays["char"] = out(model(char_ids["char"])["lm_embeddings"])  # its tokens encoded, then kept
    arrays["char_from_cache"] = out(model(char_ids["char"])["lm_embeddings"])  # every token from the cache
    cache = {"size": len(model.token_cache), "hits": model.token_cache.hits, "misses": model.token_cache.misses}
    stateful = bilm.BidirectionalLanguageModel(paths["options"], paths["weights"], max_batch_size=6)
    for n in range(3):
        arrays[f"stateful_{n}"] = out(stateful(char_ids[f"batch_{n}"])["lm_embeddings"])
    for key, buffer in stateful.state_buffers.items():
        arrays[f"buffer_{key}"] = out(buffer)
    token = bilm.BidirectionalLanguageModel(paths["token_options"], paths["weights"], use_character_inputs=False,
                                            embedding_weight_file=paths["embedding"], stateful=False, start="zeros")
    arrays["token"] = out(token(char_ids["token"])["lm_embeddings"])
    # Without the token cache: each call encodes every token of its batch.
    bf16 = bilm.BidirectionalLanguageModel(paths["options"], paths["weights"], stateful=False, start="zeros",
                                           kernel_dtype="bfloat16", token_cache_size=0)
    assert bf16.token_cache is None
    arrays["bfloat16"] = out(bf16(char_ids["char"])["lm_embeddings"])
    efml = bilm.load(paths["efml"], cache_dir=folder + "/cache-" + keras.backend.backend(), start="zeros")
    for i, vectors in enumerate(efml.embed(json.load(open(folder + "/efml_sentences.json")), layers="all")):
        arrays[f"efml_{i}"] = vectors
np.savez(folder + f"/{keras.backend.backend()}-{sys.argv[2]}.npz", **arrays)
print(json.dumps({"tensorflow_imported": "tensorflow" in sys.modules, "cache": cache}))
'''

RUNS = [("tensorflow", "portable"), ("jax", "default"), ("torch", "default")]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """`(folder, references)`: the three models' files and inputs, and the NumPy reference's activations."""
    folder = tmp_path_factory.mktemp("backends")
    options = R.make_options(max_chars=MAX_CHARS)
    max_chars = MAX_CHARS
    (folder / "options.json").write_text(json.dumps(options))
    R.write_random_weights(str(folder / "weights.hdf5"), options, seed=1)
    token_options = R.make_options(char_cnn=False)
    (folder / "token_options.json").write_text(json.dumps(token_options))
    embedding = R.write_random_token_embeddings(str(folder / "embedding.hdf5"), 20, 6, seed=2)
    efml_model = M.write_model(folder / "xx.model", "zip", seed=2)
    (folder / "efml_sentences.json").write_text(json.dumps(M.SENTENCES))
    (folder / "paths.json").write_text(json.dumps({
        "options": str(folder / "options.json"), "weights": str(folder / "weights.hdf5"),
        "token_options": str(folder / "token_options.json"), "embedding": str(folder / "embedding.hdf5"),
        "efml": str(folder / "xx.model")}))
    char = R.char_ids(SENTENCES, max_chars)
    batches = [R.char_ids(SENTENCES, max_chars), R.char_ids(SENTENCES[1:3], max_chars),
               R.char_ids(SENTENCES[::-1][:3], max_chars)]
    rng = np.random.default_rng(3)
    token = rng.integers(1, 21, size=(3, 6)).astype(np.int32)
    token[1, 4:] = 0  # a shorter row
    np.savez(folder / "inputs.npz", char=char, token=token, **{f"batch_{n}": b for n, b in enumerate(batches)})
    weights = R.read_weights(str(folder / "weights.hdf5"))
    stateful, buffers = R.run_stateful(weights, options, batches, 6)
    references = {
        "char": R.bilm_forward(weights, options, char)["lm_embeddings"],
        "char_from_cache": R.bilm_forward(weights, options, char)["lm_embeddings"],
        "token": R.bilm_forward(weights, token_options, token, token_inputs=True, embedding=embedding)[
            "lm_embeddings"],
        **{f"stateful_{n}": out["lm_embeddings"] for n, out in enumerate(stateful)},
        **{f"buffer_{('forward', 'backward')[d]}_{layer}_{part}": state[i]
           for (d, layer), state in buffers.items() for i, part in enumerate("ch")},
        **{f"efml_{i}": layers for i, layers in enumerate(M.reference_layers(efml_model))},
    }
    return folder, references


@pytest.fixture(scope="module", params=RUNS, ids=[f"{b}-{m}" for b, m in RUNS])
def activations(request, models):
    """`(backend, {name: array})` of one backend's run of `EMBED`."""
    folder, _ = models
    backend, mode = request.param
    reported = json_result(run_on_backend(backend, EMBED, folder, mode))
    if backend != "tensorflow":
        assert not reported["tensorflow_imported"]
    # The cached model's first call encoded each distinct token once (with <S>, </S> and the padding row); its
    # second encoded none.
    n_distinct = len({token for sentence in SENTENCES for token in sentence}) + 3
    assert reported["cache"] == {"size": n_distinct, "misses": n_distinct, "hits": n_distinct}, reported["cache"]
    with np.load(folder / f"{backend}-{mode}.npz") as arrays:
        return backend, dict(arrays)


def test_every_model_gives_the_reference_activations(models, activations):
    _, references = models
    backend, arrays = activations
    for name, reference in references.items():
        # A batch's activations to 1e-5. States carried through three batches of these large random weights
        # (|h| near 3) gather float32 round-off: the backends differ from each other by up to 1.4e-5 there.
        atol = 3e-5 if name.startswith(("buffer_", "stateful_2")) else 1e-5
        np.testing.assert_allclose(arrays[name], reference, rtol=0, atol=atol, err_msg=f"{name} on {backend}")


def test_bfloat16_kernels_stay_within_their_tolerance(models, activations):
    _, references = models
    _, arrays = activations
    want, got = references["char"], arrays["bfloat16"]
    assert 0 < np.abs(got - want).max()  # the kernels were rounded
    deviation = np.linalg.norm(got - want, axis=-1) / np.maximum(np.linalg.norm(want, axis=-1), 1e-6)
    assert deviation[np.linalg.norm(want, axis=-1) > 0].max() < BFLOAT16_INFERENCE_TOLERANCE * 5


# Runs in the backend's process: a model of 24 characters a token, embedded with its token cache (the new words
# read only the columns they reach) and without (every column), and the widths the encoder was called with.
TRIMMED = '''
import json, sys
import numpy as np
import keras
import bilm
import bilm.models.portable_calls as portable_calls

folder = sys.argv[1]
widths, run = [], portable_calls.inference_call

def recording(network, signature=None, then=None):  # the token encoder's calls, with their widths
    call = run(network, signature, then)
    def record(inputs):
        if set(inputs) == {"token_characters"}:
            widths.append(int(inputs["token_characters"].shape[-1]))
        return call(inputs)
    return record

portable_calls.inference_call = recording
ids = bilm.Batcher(None, 24).batch_sentences(json.loads(sys.argv[2]))
out = lambda size: keras.ops.convert_to_numpy(bilm.BidirectionalLanguageModel(
    folder + "/options_24.json", folder + "/weights_24.hdf5", stateful=False, start="zeros",
    token_cache_size=size)(ids)["lm_embeddings"])
whole, trimmed = out(0), out(100)
print(json.dumps({"widths": widths, "max_difference": float(np.abs(trimmed - whole).max()),
                  "max_value": float(np.abs(whole).max())}))
'''


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_new_words_read_only_the_columns_they_reach_and_give_every_columns_vectors(tmp_path, backend):
    """The longest words, three letters (<bow> s a t <eow>: 5 columns), and the widest filter (3) reach 8 of the
    24 columns."""
    options = R.make_options(max_chars=24)
    (tmp_path / "options_24.json").write_text(json.dumps(options))
    R.write_random_weights(str(tmp_path / "weights_24.hdf5"), options, seed=4)
    sentences = [["The", "cat", "sat", "."], ["Hi"]]
    result = json_result(run_on_backend(backend, TRIMMED, tmp_path, json.dumps(sentences)))
    assert result["widths"] == [8], result
    assert result["max_value"] > 0.1 and result["max_difference"] <= 1e-6 * result["max_value"], result
