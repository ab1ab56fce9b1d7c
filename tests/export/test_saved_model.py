"""SavedModel export: text in, the same numbers as the Python layer out."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.export.saved_model import export_layer, export_saved_model
from bilm.io.formats.output_files import OutputFileError
from bilm.models.elmo_embedding import ELMoEmbedding
from helpers import SENTENCES, write_model, write_vocab

OUTPUTS = ("word_emb", "lstm_outputs1", "lstm_outputs2", "elmo", "default", "mask", "sequence_len")
SENTENCE_TEXT = tf.constant([" ".join(s) for s in SENTENCES])
LENGTHS = tf.constant([len(s) for s in SENTENCES], tf.int32)


def _tokens(sentences, fill=""):
    width = max(map(len, sentences)) + 1
    return tf.constant([s + [fill] * (width - len(s)) for s in sentences])


def _assert_same(out, expected):
    assert set(out) == set(OUTPUTS)
    for name in OUTPUTS:
        got, want = np.asarray(out[name]), np.asarray(expected[name])
        assert got.shape == want.shape, name
        if want.dtype == bool or np.issubdtype(want.dtype, np.integer):
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    directory = tmp_path_factory.mktemp("export")
    options_file, weight_file, _ = write_model(directory)
    export_dir = export_saved_model(options_file, weight_file, str(directory / "elmo"))
    layer = ELMoEmbedding.from_files(options_file, weight_file, output="all")
    expected = {k: v.numpy() for k, v in layer(_tokens(SENTENCES)).items()}
    return export_dir, expected, layer


@pytest.mark.slow
def test_saved_model_reproduces_the_layer(exported):
    export_dir, expected, _ = exported
    assert np.abs(expected["elmo"]).max() > 0.1
    reloaded = tf.saved_model.load(export_dir)
    _assert_same(reloaded.default(SENTENCE_TEXT), _trim(expected))
    # Tokens at or beyond sequence_len are ignored, whatever they are.
    _assert_same(reloaded.tokens(_tokens(SENTENCES, fill="junk"), LENGTHS), expected)
    assert set(reloaded.signatures) == {"default", "tokens"}
    _assert_same(reloaded.signatures["default"](sentences=SENTENCE_TEXT), _trim(expected))
    _assert_same(reloaded.signatures["tokens"](tokens=_tokens(SENTENCES), sequence_len=LENGTHS), expected)


def _trim(expected):
    """The sentences signature pads to the longest sentence, one column less than `_tokens`."""
    return {k: v[:, :-1] if v.ndim >= 2 and k != "default" else v for k, v in expected.items()}


@pytest.mark.slow  # over 3 s on two busy cores
def test_tfsm_layer_reproduces_the_layer_and_keeps_the_biLM_frozen(exported):
    export_dir, expected, source = exported
    layer = keras.layers.TFSMLayer(export_dir, call_endpoint="default")
    _assert_same(layer(SENTENCE_TEXT), _trim(expected))
    # Every variable of the biLM and the mix comes back as a weight, and
    # only the mix (W, gamma) is trainable, as in the layer that was saved.
    assert len(layer.weights) == len(source.weights)
    assert len(source.trainable_weights) == 2
    assert sorted(tuple(w.shape) for w in layer.trainable_weights) == [(1,), (3,)]


@pytest.mark.slow
def test_tfsm_layer_of_a_trainable_biLM_trains_everything(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    source = ELMoEmbedding.from_files(options_file, weight_file, output="all", trainable_bilm=True)
    source.build()
    export_dir = export_layer(source, str(tmp_path / "elmo"))
    layer = keras.layers.TFSMLayer(export_dir, call_endpoint="default")
    # Everything but the start state (a constant, not a parameter).
    assert len(layer.trainable_weights) == len(source.trainable_weights) == len(source.weights) - len(
        source.start_state)


@pytest.mark.slow
def test_export_layer_keeps_trained_mix_and_writes_atomically(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    layer = ELMoEmbedding.from_files(options_file, weight_file, output="all", do_layer_norm=True)
    layer.build()
    layer.mix.W.assign([0.5, -1.0, 2.0])
    layer.mix.gamma.assign([0.7])
    expected = {k: v.numpy() for k, v in layer(_tokens(SENTENCES)).items()}
    export_dir = str(tmp_path / "out" / "elmo")
    flags = [w.value.trainable for w in layer.weights]
    assert export_layer(layer, export_dir) == export_dir
    assert [w.value.trainable for w in layer.weights] == flags  # saving restores what it changed
    # Keep the loaded object alive while its functions run (it owns the variables).
    reloaded = tf.saved_model.load(export_dir)
    _assert_same(reloaded.tokens(_tokens(SENTENCES), LENGTHS), expected)
    assert os.listdir(tmp_path / "out") == ["elmo"]  # no temporary directory left behind

    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_layer(layer, export_dir)
    layer.mix.gamma.assign([1.4])
    export_layer(layer, export_dir, overwrite=True)
    reloaded = tf.saved_model.load(export_dir)
    again = reloaded.tokens(_tokens(SENTENCES), LENGTHS)
    np.testing.assert_allclose(again["elmo"], expected["elmo"] * 2, atol=1e-5)
    assert os.listdir(tmp_path / "out") == ["elmo"]


@pytest.mark.slow
def test_token_input_model_exports_with_its_vocabulary(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path, char_cnn=False)
    vocab = write_vocab(tmp_path, ["The", "cat", "sat", ".", "a", "b"])
    embeddings = str(tmp_path / "embedding.hdf5")
    R.write_random_token_embeddings(embeddings, 9, 6)
    export_dir = export_saved_model(options_file, weight_file, str(tmp_path / "elmo"),
                                    embedding_weight_file=embeddings, vocab_file=vocab)
    layer = ELMoEmbedding.from_files(options_file, weight_file, output="all",
                          embedding_weight_file=embeddings, vocab_file=vocab)
    expected = {k: v.numpy() for k, v in layer(SENTENCE_TEXT).items()}
    reloaded = tf.saved_model.load(export_dir)
    _assert_same(reloaded.default(SENTENCE_TEXT), expected)
    with pytest.raises(ValueError, match="vocab_file"):
        export_saved_model(options_file, weight_file, str(tmp_path / "other"),
                           embedding_weight_file=embeddings)
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
def test_overwrite_replaces_a_saved_model_never_a_directory_holding_other_files(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    export_dir = tmp_path / "elmo"
    export_dir.mkdir()
    (export_dir / "saved_model.pb").write_bytes(b"old")
    (export_dir / "notes.txt").write_text("mine")
    with pytest.raises(OutputFileError, match=r"elmo holds files that are not a SavedModel's \(notes.txt\); "
                                              "overwrite=True replaces only a SavedModel's directory"):
        export_saved_model(options_file, weight_file, str(export_dir), overwrite=True)
    (export_dir / "notes.txt").unlink()
    (export_dir / "variables").mkdir()
    (export_dir / "variables" / "mine.csv").write_text("1,2")
    with pytest.raises(OutputFileError, match=r"not a SavedModel's \(variables/mine.csv\)"):
        export_saved_model(options_file, weight_file, str(export_dir), overwrite=True)
    assert (export_dir / "variables" / "mine.csv").read_text() == "1,2"
    (export_dir / "variables" / "mine.csv").unlink()
    (tmp_path / "file").write_text("mine")
    with pytest.raises(OutputFileError, match="file exists and is not a directory"):
        export_saved_model(options_file, weight_file, str(tmp_path / "file"), overwrite=True)
    assert (tmp_path / "file").read_text() == "mine"
    # A SavedModel's own entries alone: replaced whole.
    assert export_saved_model(options_file, weight_file, str(export_dir), overwrite=True,
                              start="zeros") == str(export_dir)
    assert (export_dir / "saved_model.pb").read_bytes() != b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elmo", "file", "options.json", "weights.hdf5"]
