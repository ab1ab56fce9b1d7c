"""Embedding dumps: layout, values, batching independence, token path == char path."""
import h5py
import numpy as np
import pytest

import numpy_reference as R
from bilm.text.batching import Batcher, TokenBatcher
from bilm.commands.dump import dump_bilm_embeddings, dump_token_embeddings, write_sentence_embeddings
from bilm.models.predictor import BidirectionalLanguageModel
from helpers import SENTENCES, write_model, write_vocab


def _dataset_file(tmp_path, sentences):
    path = tmp_path / "sentences.txt"
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return str(path)


def test_dump_bilm_embeddings_layout_and_values(tmp_path):
    options_file, weight_file, options = write_model(tmp_path)
    vocab_file = write_vocab(tmp_path, ["The", "cat"])
    dataset_file = _dataset_file(tmp_path, SENTENCES)
    outfile = str(tmp_path / "out.hdf5")
    dump_bilm_embeddings(vocab_file, dataset_file, options_file, weight_file, outfile,
                         batch_size=2, verbose=0)
    weights = R.read_weights(weight_file)
    with h5py.File(outfile, "r") as f:
        assert sorted(f.keys(), key=int) == [str(i) for i in range(len(SENTENCES))]
        for i, sentence in enumerate(SENTENCES):
            got = f[str(i)][...]
            assert got.shape == (3, len(sentence), 12) and got.dtype == np.float32
            ref = R.bilm_forward(weights, options, R.char_ids([sentence], 7))["lm_embeddings"][0]
            np.testing.assert_allclose(got, ref, atol=1e-5)
    assert not (tmp_path / "out.hdf5.partial").exists()


def test_batch_size_does_not_change_results(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    dataset_file = _dataset_file(tmp_path, SENTENCES * 3)
    results = []
    for batch_size in (1, 7):
        outfile = str(tmp_path / f"out{batch_size}.hdf5")
        dump_bilm_embeddings(None, dataset_file, options_file, weight_file, outfile,
                             batch_size=batch_size, verbose=0)
        with h5py.File(outfile, "r") as f:
            results.append({k: f[k][...] for k in f})
    assert results[0].keys() == results[1].keys()
    # Equal up to float round-off: matmuls of 1 and of 7 rows may add in
    # other orders.
    for key in results[0]:
        np.testing.assert_allclose(results[0][key], results[1][key], rtol=1e-5, atol=1e-6)


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


class Killed(Exception):
    """Stands for the process being killed mid-way."""


def test_interrupted_write_leaves_no_complete_looking_file_and_resumes(tmp_path):
    dataset_file = _dataset_file(tmp_path, SENTENCES * 4)
    outfile = str(tmp_path / "out.hdf5")
    calls, fail_once = [], [True]

    def embed(sentences):
        calls.append(len(sentences))
        if len(calls) == 3 and fail_once:
            fail_once.pop()
            raise Killed
        return [np.full((len(s), 2), len(s), np.float32) for s in sentences]

    with pytest.raises(Killed):
        write_sentence_embeddings(dataset_file, outfile, embed, batch_size=3, verbose=0)
    assert not (tmp_path / "out.hdf5").exists()
    with h5py.File(outfile + ".partial", "r") as f:
        assert len(f) == 6
    calls.clear()
    written = write_sentence_embeddings(dataset_file, outfile, embed, batch_size=3, resume=True, verbose=0)
    assert written == len(SENTENCES) * 4 - 6
    with h5py.File(outfile, "r") as f:
        assert len(f) == len(SENTENCES) * 4
        for i in range(len(SENTENCES) * 4):
            n = len(SENTENCES[i % len(SENTENCES)])
            np.testing.assert_array_equal(f[str(i)][...], np.full((n, 2), n))


def test_missing_output_directory_and_input_file_are_clear_errors(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    dataset_file = _dataset_file(tmp_path, SENTENCES)
    with pytest.raises(FileNotFoundError, match="output directory"):
        dump_bilm_embeddings(None, dataset_file, options_file, weight_file,
                             str(tmp_path / "missing" / "out.hdf5"), verbose=0)
    with pytest.raises(FileNotFoundError, match="Dataset file"):
        dump_bilm_embeddings(None, str(tmp_path / "nope.txt"), options_file, weight_file,
                             str(tmp_path / "out.hdf5"), verbose=0)
