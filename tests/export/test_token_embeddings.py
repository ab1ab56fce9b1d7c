"""dump_token_embeddings: the token path equals the char path; the output never replaces an input."""
import shutil

import h5py
import numpy as np
import pytest

from backend_processes import json_result, run_on_backend
from bilm.export.token_embeddings import dump_token_embeddings
from bilm.io.formats.output_files import OutputFileError
from bilm.io.formats.weight_file import write_datasets
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.text.batching import Batcher, TokenBatcher
from helpers import SENTENCES, write_model, write_vocab


def test_token_embeddings_make_the_token_path_equal_the_char_path(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    tokens = sorted({t for s in SENTENCES for t in s})
    vocab_file = write_vocab(tmp_path, tokens)
    embedding_file = str(tmp_path / "embedding.hdf5")
    dump_token_embeddings(vocab_file, options_file, weight_file, embedding_file, batch_size=3, verbose=0)
    with h5py.File(embedding_file, "r") as f:
        assert f["embedding"].shape == (len(tokens) + 3, 6)

    char_model = BidirectionalLanguageModel(options_file, weight_file, stateful=False)
    token_model = BidirectionalLanguageModel(
        options_file, weight_file, use_character_inputs=False,
        embedding_weight_file=embedding_file, stateful=False)
    char_out = char_model(Batcher(vocab_file, 7).batch_sentences(SENTENCES))
    token_out = token_model(TokenBatcher(vocab_file).batch_sentences(SENTENCES))
    for key in ("lm_embeddings", "lengths", "mask"):
        np.testing.assert_allclose(token_out[key].numpy(), char_out[key].numpy(), atol=1e-5)
    np.testing.assert_allclose(token_out["token_embeddings"].numpy(),
                               char_out["token_embeddings"].numpy(), atol=1e-5)


def test_the_output_is_never_an_input_or_a_file_bilm_did_not_write(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    vocab_file = write_vocab(tmp_path, ["The", "cat"])
    inputs = {path: open(path, "rb").read() for path in (vocab_file, options_file, weight_file)}
    for path in inputs:
        with pytest.raises(OutputFileError, match="is the input"):
            dump_token_embeddings(vocab_file, options_file, weight_file, path, overwrite=True, verbose=0)
    weights = str(tmp_path / "dumped_weights.hdf5")
    write_datasets(weights, {"char_embed": np.zeros((261, 4))}, kind="weights")
    with pytest.raises(OutputFileError, match="dumped_weights.hdf5 already exists and is a bilm weights file"):
        dump_token_embeddings(vocab_file, options_file, weight_file, weights, verbose=0)
    assert all(open(path, "rb").read() == content for path, content in inputs.items())
    outfile = str(tmp_path / "tokens.hdf5")
    assert dump_token_embeddings(vocab_file, options_file, weight_file, outfile, verbose=0) == (5, 6)
    assert dump_token_embeddings(vocab_file, options_file, weight_file, outfile, verbose=0) == (5, 6)
    with h5py.File(outfile, "r") as f:
        assert f.attrs["bilm_file"] == "token_embeddings" and f["embedding"].shape == (5, 6)


ON_BACKEND = '''
import json, sys
from bilm import dump_token_embeddings
folder = sys.argv[1]
print(json.dumps({"shape": dump_token_embeddings(folder + "/vocab.txt", folder + "/options.json",
                                                 folder + "/weights.hdf5", folder + "/tokens.hdf5", batch_size=3,
                                                 verbose=0), "tensorflow_imported": "tensorflow" in sys.modules}))
'''


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_token_embeddings_on_jax_and_pytorch_equal_tensorflows(tmp_path, backend):
    options_file, weight_file, _ = write_model(tmp_path)
    vocab_file = write_vocab(tmp_path, sorted({t for s in SENTENCES for t in s}))
    dump_token_embeddings(vocab_file, options_file, weight_file, tmp_path / "want.hdf5", verbose=0)
    folder = tmp_path / backend
    folder.mkdir()
    for source, name in ((vocab_file, "vocab.txt"), (options_file, "options.json"), (weight_file, "weights.hdf5")):
        shutil.copy(source, folder / name)
    report = json_result(run_on_backend(backend, ON_BACKEND, folder))
    assert not report["tensorflow_imported"]
    with h5py.File(tmp_path / "want.hdf5", "r") as want, h5py.File(folder / "tokens.hdf5", "r") as got:
        assert list(got["embedding"].shape) == report["shape"] == list(want["embedding"].shape)
        np.testing.assert_allclose(got["embedding"][...], want["embedding"][...], atol=1e-6)
        assert np.abs(want["embedding"][...]).max() > 0.01
