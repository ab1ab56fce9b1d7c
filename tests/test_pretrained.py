"""ELMo and load: the same numbers as the low-level path, every output form, files, the Keras layer, the CLI."""
import json
import os
import runpy
import sys
import warnings
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
import warm_python
from bilm.export.saved_model import export_layer
from bilm.export.sentence_embeddings import embed_file, write_embeddings
from bilm.io.formats.output_files import OutputFileError
from bilm.io.formats.weight_file import save_bilm_weights
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.random_weights import write_random_model
from bilm.ops.matmul_dtype import BFLOAT16_INFERENCE_TOLERANCE, INT8_INFERENCE_TOLERANCE
from bilm.pretrained import ELMo, load
from helpers import ROOT, SENTENCES


def _close(actual, expected):
    """Equal up to float32 round-off (batches of other sizes add in other orders)."""
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def elmo(model):
    options_file, weight_file, _ = model
    return ELMo(options_file, weight_file)


@pytest.mark.parametrize("layers", ["average", "all", "top", 0, 1, 2])
def test_embed_equals_the_low_level_path(elmo, stateless_layers, layers):
    # 150 sentences in batches of 2: two length-sorted chunks, returned in input order.
    sentences = SENTENCES * 30
    got = elmo.embed(sentences, layers=layers, batch_size=2)
    assert len(got) == len(sentences)
    for i, sentence in enumerate(sentences):
        expected = {"average": stateless_layers[i % 5].mean(axis=0), "all": stateless_layers[i % 5],
                    "top": stateless_layers[i % 5][-1]}.get(layers)
        if expected is None:
            expected = stateless_layers[i % 5][layers]
        assert got[i].dtype == np.float32 and got[i].shape == expected.shape
        assert got[i].shape[-2:] == (len(sentence), 12)
        _close(got[i], expected)


def test_strings_are_split_on_whitespace_and_nothing_depends_on_the_batch(elmo, stateless_layers):
    strings = [" ".join(s) for s in SENTENCES]
    strings[0] = "  The\tcat\u3000sat .\n"
    got = elmo.embed(strings, layers="all", start="zeros")
    for i in range(len(SENTENCES)):
        _close(got[i], stateless_layers[i])
    alone = [elmo.embed([sentence], layers="all", batch_size=1)[0] for sentence in reversed(SENTENCES)][::-1]
    for i in range(len(SENTENCES)):
        _close(alone[i], stateless_layers[i])
    again = elmo.embed(strings, layers="all")
    for first, second in zip(got, again, strict=True):
        np.testing.assert_array_equal(first, second)
    _close(elmo.embed_sentence("naïve 中文 tokenlongerthanthelimit 🙂 x", "top"), stateless_layers[3][-1])


def test_empty_sentences_and_an_empty_list(elmo):
    assert elmo.embed([]) == []
    assert elmo.sentence_vectors([]).shape == (0, 12)
    got = elmo.embed([[], "", "   "], layers="all")
    assert [v.shape for v in got] == [(3, 0, 12)] * 3
    assert [v.shape for v in elmo.embed([[], ""], layers="average")] == [(0, 12)] * 2
    vectors = elmo.sentence_vectors([[], ["Hi"], ""])
    assert vectors.shape == (3, 12) and vectors.dtype == np.float32
    assert not vectors[0].any() and not vectors[2].any() and vectors[1].any()


def test_sentence_vectors_are_the_token_mean_of_the_average(elmo):
    average = elmo.embed(SENTENCES)
    vectors = elmo.sentence_vectors(iter(SENTENCES), batch_size=3)  # any iterable
    for i, sentence in enumerate(SENTENCES):
        expected = average[i].mean(axis=0) if sentence else np.zeros(12)
        _close(vectors[i], expected)


def test_inputs_are_read_in_chunks(elmo, monkeypatch):
    pulled = []

    def sentences():
        for i in range(300):
            pulled.append(i)
            yield SENTENCES[i % 5]

    class Spy:
        def __init__(self, bilm):
            self.bilm, self.pulled_at_calls = bilm, []

        def __getattr__(self, name):
            return getattr(self.bilm, name)

        def __call__(self, ids, start=None):
            self.pulled_at_calls.append(len(pulled))
            return self.bilm(ids, start=start)

    spy = Spy(elmo.language_model)
    monkeypatch.setattr(elmo, "language_model", spy)
    got = elmo.embed(sentences(), layers="top", batch_size=2)
    assert len(got) == 300 and [v.shape[0] for v in got[:5]] == [len(s) for s in SENTENCES]
    assert spy.pulled_at_calls[0] == 128  # one chunk of 64 batches, not the whole input


def test_progress_bar(elmo, capsys):
    elmo.embed([["Hi"]] * 5, verbose=1)
    assert "5/5 [" in capsys.readouterr().out
    elmo.embed([["Hi"]] * 5)
    assert capsys.readouterr().out == ""
    elmo.embed([[]] * 1000, batch_size=100)  # "auto": a bar from 1,000 sentences on
    assert "1000/1000 [" in capsys.readouterr().out


def test_bad_arguments_say_what_to_pass(elmo, model):
    with pytest.raises(ValueError, match=r"layers must be 'average', 'all', 'top' or a layer number 0-2. "
                                         r"Received: layers='mean'"):
        elmo.embed(SENTENCES, layers="mean")
    with pytest.raises(ValueError, match="layer number 0-2. Received: layers=3"):
        elmo.embed(SENTENCES, layers=3)
    with pytest.raises(ValueError, match=r"start='warm' needs a boundary state.*warm_up="):
        elmo.embed(SENTENCES, start="warm")
    with pytest.raises(ValueError, match=r"start must be one of \('warm', 'zeros'\).*Received: start='cold'"):
        elmo.embed(SENTENCES, start="cold")
    assert len(elmo.embed(SENTENCES * 50, batch_size=200)) == len(SENTENCES) * 50  # stateless: any batch
    with pytest.raises(ValueError, match="batch_size must be a positive integer. Received: batch_size=0"):
        elmo.sentence_vectors(SENTENCES, batch_size=0)
    with pytest.raises(ValueError, match="verbose must be 0, 1 or 'auto'"):
        elmo.embed(SENTENCES, verbose="yes")
    with pytest.raises(TypeError, match="sentences must be a list of sentences.*embed_sentence"):
        elmo.embed("The cat sat")
    with pytest.raises(TypeError, match=r"sentences\[1\] is bytes"):
        elmo.embed(["ok", b"The cat"])
    with pytest.raises(TypeError, match=r"sentences\[2\] has a token that is not a string: 7 \(int\)"):
        elmo.embed(["a", ["b"], ["c", 7]])
    with pytest.raises(TypeError, match=r"sentences\[0\] must be a string or a list of tokens. Received a int"):
        elmo.embed([5])
    with pytest.raises(ValueError, match="layers must be one of .* for a file. Received: layers=1"):
        elmo.embed_file("in.txt", "out.hdf5", layers=1)
    options_file, weight_file, options = model
    token_options = dict(options)
    del token_options["char_cnn"]
    with pytest.raises(ValueError, match="reads token ids .* ELMo reads character models"):
        ELMo(token_options, weight_file)


def test_keras_layer_gives_the_same_numbers(elmo, stateless_layers):
    longest = max(len(s) for s in SENTENCES)
    tokens = tf.constant([s + [""] * (longest - len(s)) for s in SENTENCES])
    everything = elmo.keras_layer(output="all")(tokens)
    for i, sentence in enumerate(SENTENCES):
        n = len(sentence)
        _close(everything["word_emb"][i, :n], stateless_layers[i][0, :, :6])
        for layer in (1, 2):
            _close(everything[f"lstm_outputs{layer}"][i, :n], stateless_layers[i][layer])
        # The mix starts as equal weights with gamma 1: the average.
        _close(everything["elmo"][i, :n], stateless_layers[i].mean(axis=0))
    layer = elmo.keras_layer("lstm_outputs1", name="elmo_lstm1")
    assert layer.name == "elmo_lstm1" and layer.output_key == "lstm_outputs1"
    _close(layer(tokens)[0, :4], elmo.embed(SENTENCES[:1], layers=1)[0])


@pytest.mark.slow
def test_embed_file_writes_the_same_file_as_the_command(tmp_path, elmo, model):
    options_file, weight_file, _ = model
    input_file = tmp_path / "in.txt"
    input_file.write_text("".join(" ".join(s) + "\n" for s in SENTENCES), encoding="utf-8")
    for layers in ("all", "average"):
        ours, theirs = tmp_path / f"elmo_{layers}.hdf5", tmp_path / f"command_{layers}.hdf5"
        assert elmo.embed_file(input_file, ours, layers=layers, batch_size=2, verbose=0) == len(SENTENCES)
        embed_file(str(input_file), str(theirs), options_file, weight_file, output_format=layers, batch_size=2,
                   verbose=0)
        with h5py.File(ours, "r") as a, h5py.File(theirs, "r") as b:
            assert dict(a.attrs) == dict(b.attrs) and sorted(a) == sorted(b)
            for key in a:
                # Float32 round-off apart: a model that has run batches of
                # other shapes may run a relaxed-shape graph, whose kernels
                # (on AVX2 CPUs) add in another order.
                if a[key].dtype.kind == "f":
                    np.testing.assert_allclose(a[key][...], b[key][...], rtol=1e-5, atol=1e-5)
                else:
                    assert a[key][...] == b[key][...]
            vectors = elmo.embed(SENTENCES, layers=layers)
            for i in range(len(SENTENCES)):
                _close(a[str(i)][...], vectors[i])
    with pytest.raises(OutputFileError, match="is the input"):
        elmo.embed_file(input_file, input_file)


def test_write_embeddings_refuses_a_model_that_is_not_stateless(tmp_path, model):
    options_file, weight_file, _ = model
    input_file = tmp_path / "in.txt"
    input_file.write_text("a b\n")
    stateful = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=4)
    with pytest.raises(ValueError, match="must be a stateless character BidirectionalLanguageModel"):
        write_embeddings(stateful, str(input_file), str(tmp_path / "o.hdf5"))
    assert not os.path.exists(tmp_path / "o.hdf5")


def _nlpl_zip(path, model):
    options_file, weight_file, _ = model
    with zipfile.ZipFile(path, "w") as archive:
        archive.write(options_file, "elmo/options.json")
        archive.write(weight_file, "elmo/model.hdf5")
        archive.writestr("elmo/vocab.txt", "The\ncat\n")
        archive.writestr("elmo/meta.json", json.dumps({"corpus": "English Wikipedia", "vocabulary": 2}))
    return str(path)


def test_load_an_nlpl_zip(tmp_path, model, elmo):
    loaded = load(_nlpl_zip(tmp_path / "model.zip", model), cache_dir=tmp_path / "cache")
    assert loaded.metadata == {"corpus": "English Wikipedia", "vocabulary": 2}
    assert loaded.weight_file.startswith(str(tmp_path / "cache" / "extracted"))
    assert loaded.options == elmo.options and loaded.dim == 12 and loaded.n_layers == 2
    assert "n_layers=2, dim=12" in repr(loaded)
    for got, expected in zip(loaded.embed(SENTENCES, "all"), elmo.embed(SENTENCES, "all"), strict=True):
        _close(got, expected)


@pytest.mark.slow
def test_cli_model_argument(tmp_path, model, elmo):
    zip_file = _nlpl_zip(tmp_path / "model.zip", model)
    input_file = tmp_path / "in.txt"
    input_file.write_text("".join(" ".join(s) + "\n" for s in SENTENCES), encoding="utf-8")
    outfile = tmp_path / "out.hdf5"
    env = dict(os.environ, BILM_CACHE=str(tmp_path / "cache"))
    result = warm_python.run([sys.executable, "bin/elmo.py", str(input_file), str(outfile), "--model", zip_file,
                             "--top"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Wrote 5 sentence datasets (top) to {outfile}" in result.stdout
    assert (tmp_path / "cache" / "extracted").is_dir()
    with h5py.File(outfile, "r") as f:
        for i, vectors in enumerate(elmo.embed(SENTENCES, layers="top")):
            _close(f[str(i)][...], vectors)


@pytest.mark.parametrize("args, message", [
    (["--model", "m.zip", "--options_file", "o.json"], "either as --model or as --options_file and --weight_file"),
    (["--options_file", "o.json"], "as --model DIR|ZIP|URL|NAME, or as both --options_file and --weight_file"),
    ([], "as --model DIR|ZIP|URL|NAME, or as both --options_file and --weight_file"),
    (["--options_file", "o", "--weight_file", "w", "--sha256", "0" * 64], "--cache_dir and --sha256 go with --model"),
])
def test_cli_takes_the_model_one_way(capsys, args, message):
    main = runpy.run_path(os.path.join(ROOT, "bin", "elmo.py"))["main"]
    with pytest.raises(SystemExit) as exit_info:
        main(["in.txt", "out.hdf5", *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_cli_model_errors_are_one_line(tmp_path, capsys):
    main = runpy.run_path(os.path.join(ROOT, "bin", "elmo.py"))["main"]
    (tmp_path / "char.dic").write_text("x")
    with pytest.raises(SystemExit, match=r"^Error: .* holds an ELMoForManyLangs model"):
        main(["in.txt", str(tmp_path / "out.hdf5"), "--model", str(tmp_path)])


@pytest.mark.slow
def test_usage_example_runs():
    env = dict(os.environ)
    result = warm_python.run([sys.executable, "usage/usage_nlpl_zip.py"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "metadata: {'corpus': 'random weights', 'lemmatized': False}" in result.stdout
    assert "all layers, (n_layers + 1, n_tokens, 2P) per sentence: [(3, 9, 32), (3, 6, 32)]" in result.stdout
    assert "sentence vectors (n_sentences, 2P): (2, 32)" in result.stdout


# === The boundary state (warm start) ===

WARM_UP_TEXT = [" ".join(s) for s in SENTENCES if s] * 5


@pytest.fixture(scope="module")
def warm(model):
    options_file, weight_file, _ = model
    return ELMo(options_file, weight_file, warm_up=WARM_UP_TEXT)


def test_warm_up_makes_warm_the_default_and_keeps_every_sentence_on_its_own(warm, elmo):
    assert elmo.start == "zeros" and elmo.boundary_state is None
    assert warm.start == "warm" and set(warm.boundary_state) == {
        f"{d}_{layer}_{part}" for d in ("forward", "backward") for layer in range(2) for part in "ch"}
    alone = [warm.embed([s], layers="all")[0] for s in SENTENCES]
    together = warm.embed(list(reversed(SENTENCES)) * 3, layers="all", batch_size=4)[:len(SENTENCES)][::-1]
    for a, b in zip(alone, together, strict=True):
        _close(b, a)
    zeros = warm.embed(SENTENCES, layers="all", start="zeros")
    for z, expected in zip(zeros, elmo.embed(SENTENCES, layers="all"), strict=True):
        _close(z, expected)
    moved = [np.abs(w - z).max() for w, z in zip(alone, zeros, strict=True) if w.shape[1]]
    assert min(moved) > 1e-4  # the start changes every sentence's vectors


@pytest.mark.slow
def test_load_warms_up_from_a_file_and_a_saved_copy_starts_warm(tmp_path, model, warm):
    options_file, weight_file, _ = model
    text_file = tmp_path / "text.txt"
    text_file.write_text("\n".join(WARM_UP_TEXT) + "\n", encoding="utf-8")
    from_file = load(os.path.dirname(weight_file), warm_up=str(text_file))
    for key, value in warm.boundary_state.items():
        _close(from_file.boundary_state[key], value)
    copy = str(tmp_path / "warm_weights.hdf5")
    assert len(WARM_UP_TEXT) // 2 < from_file.warm_up(str(text_file), save_to=copy) < len(WARM_UP_TEXT)
    with pytest.raises(OutputFileError, match="is the input"):
        from_file.warm_up(str(text_file), save_to=weight_file)
    reloaded = ELMo(options_file, copy)
    assert reloaded.start == "warm"
    for a, b in zip(reloaded.embed(SENTENCES), from_file.embed(SENTENCES), strict=True):
        _close(a, b)
    # The copy has its options beside it, so bilm.load opens it as it is.
    assert os.path.isfile(tmp_path / "warm_weights_options.json")
    opened = load(copy)
    assert opened.start == "warm" and opened.weight_file == copy
    for a, b in zip(opened.embed(SENTENCES), from_file.embed(SENTENCES)):
        _close(a, b)


@pytest.mark.slow
def test_load_takes_the_start(tmp_path, warm):
    copy = str(tmp_path / "warm.hdf5")
    warm.warm_up(WARM_UP_TEXT, save_to=copy)
    assert load(copy).start == "warm"
    zeros = load(copy, start="zeros")
    assert zeros.start == "zeros"
    for a, b in zip(zeros.embed(SENTENCES), warm.embed(SENTENCES, start="zeros")):
        _close(a, b)


@pytest.mark.slow
def test_the_keras_layer_and_the_savedmodel_carry_the_state(tmp_path, warm):
    layer = warm.keras_layer(output="all")
    assert layer.start == "warm"
    tokens = tf.ragged.constant([s for s in SENTENCES]).to_tensor(default_value="")
    out = layer(tokens)
    expected = warm.embed(SENTENCES, layers="all")
    for i, sentence in enumerate(SENTENCES):
        _close(out["lstm_outputs1"].numpy()[i, :len(sentence)], expected[i][1])
    keras_model = keras.Sequential([keras.Input(shape=(None,), dtype="string"),
                                    warm.keras_layer(output="lstm_outputs1")])
    archive = str(tmp_path / "tagger.keras")
    keras_model.save(archive)
    restored = keras.models.load_model(archive)
    _close(restored(tokens).numpy(), keras_model(tokens).numpy())
    assert restored.layers[-1].start == "warm"
    export_dir = export_layer(layer, str(tmp_path / "saved"))
    served = tf.saved_model.load(export_dir)
    lengths = tf.constant([len(s) for s in SENTENCES], tf.int32)
    _close(served.tokens(tokens, lengths)["lstm_outputs1"].numpy(), out["lstm_outputs1"].numpy())


def test_bulk_batches_give_the_batch_32_vectors(elmo):
    sentences = SENTENCES * 40
    bulk = elmo.embed(sentences, layers="all")  # batches of about BULK_MAX_TOKENS tokens
    by_32 = elmo.embed(sentences, layers="all", batch_size=32)
    for a, b in zip(bulk, by_32):
        _close(a, b)


@pytest.fixture(scope="module")
def initialised_model(tmp_path_factory):
    """A model whose weights are initialised as bilm initialises them (the
    weights `BFLOAT16_INFERENCE_TOLERANCE` is stated for)."""
    return write_random_model(str(tmp_path_factory.mktemp("initialised")), R.make_options(), seed=0)


def _relative_deviations(got, want):
    """Per token vector of every layer: `|got - want| / |want|` (Euclidean)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)


@pytest.mark.slow
def test_bfloat16_stays_within_its_tolerance_of_float32_on_every_path(tmp_path, initialised_model):
    options_file, weight_file = initialised_model
    want = ELMo(options_file, weight_file, start="zeros").embed(SENTENCES, layers="all")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # that the weights hold no boundary state
        elmo = load(os.path.dirname(weight_file), kernel_dtype="bfloat16")
    assert elmo.kernel_dtype == elmo.language_model.kernel_dtype == "bfloat16"
    assert "kernel_dtype='bfloat16'" in repr(elmo)
    got = elmo.embed(SENTENCES, layers="all", start="zeros")
    for g, w in zip(got, want):
        if not w.size:
            continue
        deviations = _relative_deviations(g, w)
        assert deviations.max() < BFLOAT16_INFERENCE_TOLERANCE
        assert deviations.max() > 1e-4  # more than float32 round-off: bfloat16 was used

    # The Keras layer takes the model's kernel_dtype, and keeps it in its config.
    longest = max(len(s) for s in SENTENCES)
    tokens = tf.constant([s + [""] * (longest - len(s)) for s in SENTENCES])
    layer = elmo.keras_layer(output="all", start="zeros")
    assert layer.kernel_dtype == "bfloat16"
    everything = layer(tokens)
    for i, sentence in enumerate(SENTENCES):
        for index in (1, 2) if sentence else ():
            deviations = _relative_deviations(everything[f"lstm_outputs{index}"][i, :len(sentence)], want[i][index])
            assert deviations.max() < BFLOAT16_INFERENCE_TOLERANCE
    assert ELMoEmbedding.from_config(layer.get_config()).kernel_dtype == "bfloat16"
    with pytest.raises(ValueError, match="trainable_bilm=True fine-tunes the biLM, which needs float32 kernels"):
        elmo.keras_layer(trainable_bilm=True)
    with pytest.raises(ValueError, match="kernel_dtype must be one of 'float32', 'bfloat16', 'int8', got 'float16'"):
        ELMo(options_file, weight_file, kernel_dtype="float16")


@pytest.mark.slow
def test_int8_is_float32_over_the_quantized_weights_on_every_path(tmp_path, initialised_model):
    # bilm.load quantizes each kernel once, per column; after that every
    # product keeps float32 activations, so the vectors are a float32
    # model's over the quantized weights (written back as float32 by the
    # weight table), and within INT8_INFERENCE_TOLERANCE of the original ones.
    options_file, weight_file = initialised_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # that the weights hold no boundary state
        elmo = load(os.path.dirname(weight_file), kernel_dtype="int8")
    assert elmo.kernel_dtype == "int8" and "kernel_dtype='int8'" in repr(elmo)
    dequantized = str(tmp_path / "dequantized.hdf5")
    save_bilm_weights(elmo.network, dequantized)
    got = elmo.embed(SENTENCES, layers="all", start="zeros")
    want = ELMo(options_file, dequantized, start="zeros").embed(SENTENCES, layers="all")
    original = ELMo(options_file, weight_file, start="zeros").embed(SENTENCES, layers="all")
    for g, w, o in zip(got, want, original):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)
        if o.size:
            deviations = _relative_deviations(g, o)
            assert 1e-4 < deviations.max() < INT8_INFERENCE_TOLERANCE

    # The Keras layer, a .keras archive of it and its SavedModel keep the int8 kernels.
    longest = max(len(s) for s in SENTENCES)
    tokens = tf.constant([s + [""] * (longest - len(s)) for s in SENTENCES])
    layer = elmo.keras_layer(output="all", start="zeros")
    assert layer.kernel_dtype == "int8"
    everything = {k: v.numpy() for k, v in layer(tokens).items()}
    for i, sentence in enumerate(SENTENCES):
        if sentence:
            np.testing.assert_allclose(everything["lstm_outputs2"][i, :len(sentence)], want[i][2], rtol=1e-5,
                                       atol=2e-6)
    assert {w.dtype for w in layer.network.weights} == {"float32", "int8"}
    archive = str(tmp_path / "int8.keras")
    keras.Sequential([keras.Input(shape=(None,), dtype="string"), layer]).save(archive)
    restored = keras.models.load_model(archive).layers[-1]
    assert restored.kernel_dtype == "int8"
    np.testing.assert_array_equal(restored(tokens)["lstm_outputs2"].numpy(), everything["lstm_outputs2"])
    served = tf.saved_model.load(export_layer(layer, str(tmp_path / "saved")))
    lengths = tf.constant([len(s) for s in SENTENCES], tf.int32)
    np.testing.assert_allclose(served.tokens(tokens, lengths)["lstm_outputs2"].numpy(), everything["lstm_outputs2"],
                               rtol=1e-5, atol=2e-6)

    # Embedding files record it.
    input_file = tmp_path / "in.txt"
    input_file.write_text("".join(" ".join(s) + "\n" for s in SENTENCES), encoding="utf-8")
    embed_file(str(input_file), str(tmp_path / "out.hdf5"), options_file, weight_file, start="zeros",
               kernel_dtype="int8", verbose=0)
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert f.attrs["matmul_dtype"] == "int8"
        for i, w in enumerate(want):
            np.testing.assert_allclose(f[str(i)][...], w, rtol=1e-5, atol=2e-6)


@pytest.mark.slow
def test_files_record_bfloat16_and_a_resume_never_mixes_it_with_float32(tmp_path, initialised_model):
    options_file, weight_file = initialised_model
    input_file = tmp_path / "in.txt"
    input_file.write_text("".join(" ".join(s) + "\n" for s in SENTENCES), encoding="utf-8")
    output = tmp_path / "out.hdf5"
    script = os.path.join(ROOT, "bin", "elmo.py")
    done = warm_python.run([sys.executable, script, str(input_file), str(output), "--options_file", options_file,
                            "--weight_file", weight_file, "--start", "zeros", "--kernel_dtype", "bfloat16"],
                           capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    want = ELMo(options_file, weight_file, start="zeros").embed(SENTENCES, layers="all")
    with h5py.File(output, "r") as f:
        assert f.attrs["matmul_dtype"] == "bfloat16"
        for i, w in enumerate(want):
            assert np.all(_relative_deviations(f[str(i)][...], w) < BFLOAT16_INFERENCE_TOLERANCE)

    # A half-written float32 run is not continued in bfloat16.
    os.rename(output, str(output) + ".partial")
    with h5py.File(str(output) + ".partial", "a") as f:
        f.attrs["matmul_dtype"] = "float32"
        del f["1"]
    with pytest.raises(ValueError, match="matmul_dtype was 'float32', now 'bfloat16'.*no_resume"):
        embed_file(str(input_file), str(output), options_file, weight_file, start="zeros", kernel_dtype="bfloat16",
                   verbose=0)
