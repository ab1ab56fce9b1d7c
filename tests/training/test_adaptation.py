"""Adapting a published model to new text (train(..., init_from=MODEL), bin/train_elmo.py --init_from).

The "published" model is a tiny biLM trained here on the cycle corpus of
`training_helpers` and laid out as the NLPL repository publishes models (a
zip of options.json with training keys, model.hdf5, vocab.txt, meta.json
in one folder); the new text is another cycle, over some of those words
and some new ones, in another order.
"""
import glob
import importlib.util
import io
import json
import os
import zipfile

import numpy as np
import pytest
import tensorflow as tf

import bilm
import numpy_reference as R
from bilm.errors import UserError
from bilm.io.formats.weight_file import read_boundary_state
from bilm.options import load_options
from bilm.training import dump_weights, train, train_from_files
from bilm.training.config.settings import training_settings
from bilm.training.data.shards import count_tokens
from bilm.training.model.adaptation import (
    AdaptationError,
    adaptation_options,
    load_model_weights,
    open_model_to_adapt,
)
from bilm.training.model.softmax_init import log_frequencies, positions_in_one_pass
from bilm.training.run import run_checkpoint
from bilm.training.run.from_files import evaluate_from_files as heldout_perplexity
from helpers import ROOT
from tensorflow_reference.evaluation import evaluate_lm
from tensorflow_reference.softmax_init import initialize_softmax
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import WORDS, checkpoint_arrays, open_data, small_softmax_fit, tiny_options, write_corpus

# The new text's words: half of the published model's, and new ones shaped alike.
NEW_WORDS = WORDS[::2] + ["amber", "bronze", "cobalt", "denim", "ebony", "fuchsia", "gold", "henna", "indigo",
                          "jade"]
# Training keys of the adapted runs (the architecture is the model's).
SETTINGS = {"batch_size": 16, "unroll_steps": 5, "n_negative_samples_batch": 8, "n_epochs": 4, "dropout": 0.1,
            "learning_rate": 0.3}


def _cycle_corpus(directory, words, n_train, n_heldout, seed):
    """Sentences of consecutive words of the cycle `words`, most starting near its beginning (so the
    first words are the most frequent): shards, held-out file, vocabulary."""
    rng = np.random.default_rng(seed)

    def sentences(n):
        lines = []
        for _ in range(n):
            start, length = min(rng.geometric(0.15) - 1, len(words) - 1), rng.integers(3, 9)
            lines.append(" ".join(words[(start + k) % len(words)] for k in range(length)))
        return lines

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train_0.txt").write_text("\n".join(sentences(n_train)) + "\n")
    (directory / "heldout.txt").write_text("\n".join(sentences(n_heldout)) + "\n")
    (directory / "vocab.txt").write_text("\n".join(["<S>", "</S>", "<UNK>"] + words) + "\n")
    return {"train": str(directory / "train_*.txt"), "heldout": str(directory / "heldout.txt"),
            "vocab": str(directory / "vocab.txt"), "n_vocab": len(words) + 3}


def _publish(root, options_file, weight_file):
    """The model of these files in the NLPL repository's layout: `{"directory", "zip": bytes, "weights"}`."""
    directory = root / "nlpl_999"
    directory.mkdir()
    os.replace(weight_file, directory / "model.hdf5")
    os.replace(options_file, directory / "options.json")
    (directory / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    (directory / "meta.json").write_text(json.dumps({"id": 999, "corpus": "the cycle"}))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(os.listdir(directory)):
            archive.write(directory / name, f"999/{name}")
    return {"directory": str(directory), "zip": buffer.getvalue(), "weights": R.read_weights(directory / "model.hdf5")}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A tiny biLM trained on the cycle corpus, published (`_publish`): what adapting learns from."""
    root = tmp_path_factory.mktemp("published")
    corpus = write_corpus(root, n_train=600, n_heldout=20)
    options = tiny_options(dropout=0.0, learning_rate=0.5, batch_size=32, n_epochs=10)
    train(options, open_data(options, corpus), 1, root / "ckpt", None, max_steps=300, verbose=0)
    written = dump_weights(root / "ckpt", root / "dumped.hdf5")
    return _publish(root, written["options_file"], written["weight_file"])


@pytest.fixture(scope="module")
def random_published(tmp_path_factory):
    """`published`'s architecture and layout with random weights, for what does not depend on what the model
    learned (the options' checks, bad models, the softmax's start): no training run."""
    root = tmp_path_factory.mktemp("random_published")
    options = tiny_options(dropout=0.0, learning_rate=0.5, batch_size=32)
    options["char_cnn"]["n_characters"] = 262  # the prediction form, as dump_weights writes it
    (root / "options.json").write_text(json.dumps(options))
    R.write_random_weights(root / "weights.hdf5", options)
    return _publish(root, root / "options.json", root / "weights.hdf5")


@pytest.fixture(scope="module")
def new_text(tmp_path_factory):
    return _cycle_corpus(tmp_path_factory.mktemp("new_text"), NEW_WORDS, n_train=300, n_heldout=40, seed=5)


@pytest.fixture(autouse=True)
def _small_softmax_fit(monkeypatch):
    small_softmax_fit(monkeypatch)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BILM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _script(name):
    spec = importlib.util.spec_from_file_location(f"bin_{name}", os.path.join(ROOT, "bin", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_model_served_as_a_zip_adapts_dumps_and_loads(tmp_path, published, new_text, server, cache):
    server.routes["/repository/999.zip"] = published["zip"]
    url = server.url("/repository/999.zip")
    common = dict(overrides=SETTINGS, init_from=url, heldout_prefix=None, verbose=0)
    evaluation = dict(test_prefix=new_text["heldout"], vocab_file=new_text["vocab"], batch_size=8, verbose=0)

    start = train_from_files(new_text["train"], new_text["vocab"], tmp_path / "start", max_steps=0, **common)
    assert start["step"] == 0
    before = heldout_perplexity(save_dir=tmp_path / "start", **evaluation)
    adapted = train_from_files(new_text["train"], new_text["vocab"], tmp_path / "adapted", max_steps=40, **common)
    assert adapted["step"] == 40
    after = heldout_perplexity(save_dir=tmp_path / "adapted", **evaluation)
    assert after < before, (before, after)
    assert server.requests == ["/repository/999.zip"]  # downloaded once, then from the cache

    # The run's options: the model's architecture (training form), the caller's training keys.
    saved = load_options(tmp_path / "adapted" / "options.json")
    published_options = load_options(os.path.join(published["directory"], "options.json"))
    assert saved.to_dict()["lstm"] == published_options.to_dict()["lstm"]
    assert saved.char_cnn == published_options.for_training().char_cnn
    assert saved.get("batch_size") == 16 and saved.get("n_tokens_vocab") == new_text["n_vocab"]
    assert published_options.get("n_train_tokens") == 8000 and saved.get("n_train_tokens") == count_tokens(
        new_text["train"])
    assert "all_clip_norm_val" not in saved.to_dict()  # TRAINING_DEFAULTS', not the model's file's

    out = tmp_path / "model" / "weights.hdf5"
    written = dump_weights(tmp_path / "adapted", out)
    dumped = R.read_weights(written["weight_file"])
    assert sorted(dumped) == sorted(published["weights"])
    moved = [name for name in dumped if not np.allclose(dumped[name], published["weights"][name])]
    assert "char_embed" in moved and "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0" in moved and "CNN/W_cnn_2" in moved
    assert read_boundary_state(written["weight_file"])[1] > 0  # measured on the new text at the run's end
    elmo = bilm.load(tmp_path / "model")
    vectors = elmo.embed(["amber bronze cobalt", "alpha"])
    assert vectors[0].shape == (3, 16) and np.all(np.isfinite(vectors[0]))


@pytest.mark.slow
def test_initialised_softmaxes(tmp_path, published, new_text):
    model = open_model_to_adapt(published["directory"])
    options = adaptation_options(model, SETTINGS).updated(n_tokens_vocab=new_text["n_vocab"], n_train_tokens=1000)
    options, settings = training_settings(options)
    data, heldout = open_data(options, new_text), open_data(options, new_text, test=True)
    perplexity, started, softmax = {}, {}, {}
    for method in ("random", "encoding", "fit"):
        tf.keras.utils.set_random_seed(0)
        lm = TrainingLM(options, settings)
        load_model_weights(lm, model)
        started[method] = initialize_softmax(lm, data, method, n_positions=2000)
        perplexity[method] = evaluate_lm(lm, heldout, 8)["perplexity"]
        softmax[method] = lm.softmax_weights.numpy(), lm.softmax_bias.numpy()

    # Random rows and zero biases, as from scratch: about the vocabulary's size (23).
    assert perplexity["random"] > 0.7 * new_text["n_vocab"]
    # "encoding": each row is the model's encoding of its word, as the
    # prediction model computes it (character ids shifted, a padding row in
    # front), times the scale that fits best (0 gives the uniform distribution).
    elmo = bilm.load(published["directory"], start="zeros")
    encodings = elmo.embed([NEW_WORDS], layers="all")[0][0, :, :8]  # layer 0 is [x, x]
    weights, bias = softmax["encoding"]
    scale = started["encoding"]["scale"]
    assert scale >= 0 and not np.any(bias)
    np.testing.assert_allclose(weights[3:], scale * encodings, rtol=1e-4, atol=1e-6)
    assert started["encoding"]["sample_perplexity"] <= new_text["n_vocab"] + 1e-6
    # "fit" knows from the model's outputs which word follows which: far
    # below the frequencies alone on the sample, and on the held-out text.
    assert started["fit"]["sample_perplexity"] < 0.5 * started["fit"]["unigram_perplexity"]
    assert started["fit"]["frequency_perplexity"] < 0.5 * started["fit"]["unigram_perplexity"]
    assert perplexity["fit"] < 0.5 * min(perplexity["random"], perplexity["encoding"]), (perplexity, started)


def _published_lm_for(published, new_text):
    """`(lm, options, settings)`: a TrainingLM holding the published weights, set up to adapt to `new_text`."""
    model = open_model_to_adapt(published["directory"])
    options = adaptation_options(model, SETTINGS).updated(n_tokens_vocab=new_text["n_vocab"], n_train_tokens=1000)
    options, settings = training_settings(options)
    lm = TrainingLM(options, settings)
    load_model_weights(lm, model)
    return lm, options, settings


def test_the_frequency_bias_is_the_words_log_frequencies(random_published, new_text):
    lm, options, settings = _published_lm_for(random_published, new_text)
    started = initialize_softmax(lm, open_data(options, new_text), "encoding", n_positions=2000,
                                 frequency_bias=True)
    # The scale is fitted with the frequencies in the bias: never worse than they are alone.
    assert started["scale"] >= 0 and started["sample_perplexity"] <= started["unigram_perplexity"] * (1 + 1e-6)
    bias = lm.softmax_bias.numpy()
    assert np.exp(bias).sum() == pytest.approx(1.0, rel=1e-4)
    assert bias[1] > bias[3] > bias[-1]  # </S> ends every sentence; the cycle's first word is the most frequent


def test_log_frequencies_share_the_unseen_mass_by_rank():
    counts = np.array([5, 0, 3, 1, 1, 0, 0])
    p = np.exp(log_frequencies(counts))
    assert p.sum() == pytest.approx(1.0)
    unseen_mass = 2 / 10  # two words seen once, ten targets (Good-Turing)
    assert p[[1, 5, 6]].sum() == pytest.approx(unseen_mass)
    assert p[1] / p[5] == pytest.approx(6 / 2) and p[5] > p[6]
    assert p[0] / p[2] == pytest.approx(5 / 3)
    np.testing.assert_allclose(np.exp(log_frequencies([2, 2])), [0.5, 0.5])


@pytest.mark.slow
def test_softmax_warmup_trains_the_softmax_alone_and_a_restart_of_an_adapted_run_is_exact(tmp_path, published,
                                                                                         new_text):
    # Dropout masks, negative samples and the warm-up's end must all continue exactly.
    options = dict(SETTINGS, softmax_warmup_steps=6)
    data = open_data(tiny_options(), new_text)
    straight = train(options, data, 1, tmp_path / "straight", None, init_from=published["directory"],
                     max_steps=8, verbose=0)
    first = train(options, data, 1, tmp_path / "stopped", None, init_from=published["directory"], max_steps=4,
                  checkpoint_every=2, verbose=0)
    # Within the warm-up the softmax trains alone: the biLM's weights and its optimizer's state stay as they were.
    (_, at_two), = run_checkpoint.kept_checkpoints(tmp_path / "stopped")
    two, four = checkpoint_arrays(at_two), checkpoint_arrays(first["checkpoint"])
    key = "{}/{}/.ATTRIBUTES/VARIABLE_VALUE".format
    biLM = [name for name in four if name.startswith("model/")]
    assert biLM and all(np.array_equal(four[name], two[name]) for name in biLM)
    assert all(np.all(four[name] == 1.0) for name in four if name.startswith("optimizer/") and "softmax" not in name)
    assert not np.allclose(four[key("softmax", "W")], two[key("softmax", "W")])
    saved = load_options(tmp_path / "stopped" / "options.json")
    assert saved.get("softmax_warmup_steps") == 6
    resumed = train(saved, open_data(saved, new_text), 1, tmp_path / "stopped", None,
                    restart_ckpt_file=first["checkpoint"], max_steps=4, verbose=0)
    assert resumed["step"] == straight["step"] == 8
    expected, got = checkpoint_arrays(straight["checkpoint"]), checkpoint_arrays(resumed["checkpoint"])
    assert sorted(expected) == sorted(got)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # After the warm-up, everything trains.
    assert any(not np.array_equal(got[name], four[name]) for name in biLM)


def test_options_may_repeat_the_architecture_not_contradict_it(tmp_path, random_published):
    model = open_model_to_adapt(random_published["directory"])
    published_options = json.loads(open(os.path.join(random_published["directory"], "options.json")).read())
    assert published_options["batch_size"] == 32 and published_options["char_cnn"]["n_characters"] == 262

    # Without options: the model's architecture, and no training key of its file.
    options = adaptation_options(model)
    assert options.char_cnn.n_characters == 261 and set(options.to_dict()) == {"lstm", "char_cnn"}
    assert "the training options adapting" in options.source

    repeated = tiny_options(batch_size=4)  # the architecture, 261 characters, as every training options file
    assert adaptation_options(model, repeated).get("batch_size") == 4
    options_file = tmp_path / "options.json"
    contradicting = tiny_options()
    contradicting["lstm"]["dim"] = 32
    contradicting["char_cnn"]["n_highway"] = 2
    contradicting["char_cnn"]["embedding"]["dim"] = 5
    options_file.write_text(json.dumps(contradicting))
    with pytest.raises(AdaptationError) as error:
        adaptation_options(model, options_file)
    message = str(error.value)
    assert message.startswith(f"{options_file} contradicts the architecture of the model to adapt")
    assert "'lstm.dim' is 32 here but 16 in the model" in message
    assert "'char_cnn.n_highway' is 2 here but 1 in the model" in message
    assert "'char_cnn.embedding.dim' is 5 here but 4 in the model" in message
    assert "\n" not in message

    # A typo in a section stays, for the training settings to name.
    typo = tiny_options()
    typo["lstm"]["dimm"] = 16
    with pytest.raises(UserError, match="unknown training option 'lstm.dimm'. Did you mean 'dim'"):
        training_settings(adaptation_options(model, typo))


def _token_input_model(directory):
    options = R.make_options(char_cnn=False)
    directory.mkdir()
    (directory / "options.json").write_text(json.dumps(options))
    R.write_random_weights(str(directory / "weights.hdf5"), options)
    return directory


@pytest.mark.parametrize("case, message", [
    ("token inputs", r"is a token-input model \(.*options.json has no 'char_cnn' section\)"),
    ("missing", r"Cannot open the model to adapt, .*nowhere: No model at .*nowhere: no such file"),
    ("no model", r"Cannot open the model to adapt, .*empty: .*holds no model bilm reads"),
    ("404", r"Cannot open the model to adapt, http://127.0.0.1:\d+/missing.zip: .*404"),
    ("truncated zip", r"Cannot open the model to adapt, .*short.zip: .*"),
    ("unknown name", r"Cannot open the model to adapt, nlpl:12345: "),
])
def test_each_bad_model_is_one_line_before_any_work(tmp_path, random_published, new_text, server, cache, case, message):
    server.routes["/short.zip"] = random_published["zip"][: len(random_published["zip"]) // 2]
    init_from = {
        "token inputs": lambda: str(_token_input_model(tmp_path / "tokens")),
        "missing": lambda: str(tmp_path / "nowhere"),
        "no model": lambda: (tmp_path / "empty").mkdir() or str(tmp_path / "empty"),
        "404": lambda: server.url("/missing.zip"),
        "truncated zip": lambda: server.url("/short.zip"),
        "unknown name": lambda: "nlpl:12345",
    }[case]()
    with pytest.raises(AdaptationError, match=message) as error:
        open_model_to_adapt(init_from)
    assert isinstance(error.value, UserError)
    save_dir = tmp_path / "ckpt"
    args = ["--train_prefix", new_text["train"], "--vocab_file", new_text["vocab"], "--save_dir", str(save_dir),
            "--init_from", init_from]
    with pytest.raises(SystemExit) as exited:
        _script("train_elmo").main(args)
    assert str(exited.value).startswith("Error: ") and "\n" not in str(exited.value)
    assert not save_dir.exists()


def test_script_errors_for_a_contradicting_options_file_and_a_size(tmp_path, random_published, new_text):
    options_file = tmp_path / "options.json"
    contradicting = tiny_options()
    contradicting["lstm"]["dim"] = 32
    options_file.write_text(json.dumps(contradicting))
    args = ["--train_prefix", new_text["train"], "--vocab_file", new_text["vocab"], "--save_dir",
            str(tmp_path / "ckpt"), "--init_from", random_published["directory"]]
    with pytest.raises(SystemExit, match=r"^Error: .*options.json contradicts the architecture of the model to "
                                         r"adapt, .*nlpl_999 \(.*\): 'lstm.dim' is 32 here but 16 in the model"):
        _script("train_elmo").main(args + ["--options_file", str(options_file)])
    with pytest.raises(SystemExit, match=r"^Error: Give either a model to adapt \(--init_from\).* or a size"):
        _script("train_elmo").main(args + ["--size", "small"])
    assert not (tmp_path / "ckpt").exists()


def _count_calls(monkeypatch, module, name, calls):
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


@pytest.mark.slow
def test_scripts_adapt_restart_test_and_dump_and_each_check_runs_once(tmp_path, published, new_text, monkeypatch,
                                                                      capsys):
    import bilm.training.config.settings as settings_module
    import bilm.training.config.training_config as config_module
    import bilm.training.run.run_directory as checkpoints_module
    import bilm.training.run.run_origin as origin_module

    calls = {}
    for module, name in [(origin_module, "open_model_to_adapt"), (origin_module, "adaptation_options"),
                         (origin_module, "check_softmax_init"), (config_module, "training_settings"),
                         (config_module, "count_tokens"), (settings_module, "check_known_keys"),
                         (checkpoints_module, "check_vocabulary")]:
        _count_calls(monkeypatch, module, name, calls)
    save_dir = str(tmp_path / "ckpt")
    common = ["--train_prefix", new_text["train"], "--vocab_file", new_text["vocab"], "--save_dir", save_dir,
              "--batch_size", "8", "--unroll_steps", "5", "--n_negative_samples_batch", "8", "--max_steps", "2"]
    first = _script("train_elmo").main(common + ["--init_from", os.path.join(published["directory"], "model.hdf5"),
                                                 "--softmax_init", "encoding", "--softmax_warmup_steps", "1"])
    assert calls == {"open_model_to_adapt": 1, "adaptation_options": 1, "check_softmax_init": 1,
                     "training_settings": 1, "check_known_keys": 1, "count_tokens": 1}
    out = capsys.readouterr().out
    assert "Adapting " in out and "softmax_init='encoding'" in out
    assert "The first step of the run trains the softmax alone, the biLM frozen" in out
    assert first["step"] == 2
    calls.clear()
    second = _script("restart").main(common + ["--max_steps", "3"])
    # The checkpoint's options hold n_train_tokens and the data is the same: nothing is counted again.
    assert calls == {"training_settings": 1, "check_known_keys": 1, "check_vocabulary": 1}
    assert second["step"] == 3
    perplexity = _script("run_test").main(["--test_prefix", new_text["heldout"], "--vocab_file", new_text["vocab"],
                                           "--save_dir", save_dir, "--batch_size", "4"])
    assert 1 < perplexity < new_text["n_vocab"]
    written = _script("dump_weights").main(["--save_dir", save_dir, "--outfile", str(tmp_path / "w.hdf5")])
    assert bilm.load(written["weight_file"]).embed(["amber gold"])[0].shape == (2, 16)


def test_a_short_text_is_read_once_for_the_fit(random_published, new_text):
    """The fit reads one pass over a text shorter than its sample, not the same text again and again."""
    lm, options, settings = _published_lm_for(random_published, new_text)
    data = open_data(options, new_text)
    lines = open(glob.glob(new_text["train"])[0]).read().split("\n")
    one_pass = 2 * sum(len(line.split()) + 1 for line in lines if line.strip())
    assert positions_in_one_pass(data, 10 ** 9) == one_pass
    assert positions_in_one_pass(data, 100) == 100
    started = initialize_softmax(lm, data, "fit", n_positions=20 * one_pass)
    batch_positions = 2 * settings.batch_size * settings.unroll_steps
    assert one_pass <= started["positions"] < one_pass + batch_positions
