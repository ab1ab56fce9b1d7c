"""Training the biLM: options, convergence, the step's math, NumPy oracle, dumps, scripts."""
import importlib.util
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.io.weight_file import load_bilm_weights
from bilm.models.network import build_bilm
from bilm.models.predictor import BidirectionalLanguageModel
from bilm.options import OptionsError, load_options
from bilm.text.batching import Batcher, TokenBatcher
from bilm.training.checkpoints import CheckpointError
from bilm.training.evaluation import evaluate, load_training_model
from bilm.training.loop import train
from bilm.training.objective import TrainingLM
from bilm.training.optimizer import SparseAdagrad, deduplicate, global_norm_scale
from bilm.training.settings import training_settings
from bilm.training.shards import count_tokens
from bilm.training.train_step import TrainStep
from bilm.training.weight_export import dump_weights
from helpers import ROOT
from training_helpers import (
    MAX_CHARS,
    WORDS,
    checkpoint_arrays,
    clip_by_global_norm,
    open_data,
    scale_gradient,
    tiny_options,
    unigram_perplexity,
    write_corpus,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


# === Options ===

@pytest.mark.parametrize("change, message", [
    (lambda o: o["char_cnn"].update(n_characters=262), "n_characters' is 262.*needs 261"),
    (lambda o: o.update(share_embedding_softmax=True), "share_embedding_softmax.*token inputs"),
    (lambda o: o.pop("n_tokens_vocab"), "n_tokens_vocab"),
    (lambda o: o.update(n_negative_samples_batch=100), "n_negative_samples_batch' \\(100\\) exceeds"),
    (lambda o: o.update(dropout=1.5), "dropout"),
    (lambda o: o.update(matmul_dtype="float16"), "'matmul_dtype' must be one of 'float32', 'bfloat16'"),
])
def test_bad_training_options_are_clear_errors(change, message):
    options = tiny_options()
    change(options)
    with pytest.raises(OptionsError, match=message):
        training_settings(options)


def test_n_train_tokens_below_one_batch_is_a_clear_error(tmp_path, corpus):
    options = tiny_options(n_train_tokens=10)
    with pytest.raises(OptionsError, match="n_train_tokens \\(10\\) is less than one global batch"):
        train(options, open_data(options, corpus), 1, tmp_path / "ckpt", None, verbose=0)


# === Convergence ===

# Char inputs without skip connections learn too, but this toy configuration
# needs about 800 steps for it; the four float32 runs cover every setting
# twice, and the bfloat16 matmuls learn as well.
@pytest.mark.parametrize("char, bidirectional, skip, steps, extra", [
    (True, True, True, 250, {}),
    (True, True, True, 250, {"matmul_dtype": "bfloat16"}),
    (True, False, True, 250, {}),
    (False, True, False, 250, {"learning_rate": 0.5}),
    (False, False, True, 150, {"share_embedding_softmax": True}),
])
def test_training_goes_far_below_unigram_perplexity(tmp_path, corpus, char, bidirectional, skip, steps, extra):
    options = tiny_options(char=char, bidirectional=bidirectional, skip=skip, n_train_tokens=16 * 5 * steps,
                           **extra)
    heldout = open_data(options, corpus, test=True)
    lm_before = TrainingLM(*training_settings(options))
    before = evaluate(lm_before, heldout, batch_size=8)["perplexity"]
    result = train(options, open_data(options, corpus), 1, tmp_path / "ckpt", None,
                   heldout_data=heldout, heldout_batch_size=8, verbose=0)
    unigram = unigram_perplexity(corpus)
    assert 15 < unigram < 25 and before > unigram
    assert result["step"] == steps
    assert result["heldout_perplexity"] < 0.4 * unigram, (result, unigram)
    names = set(checkpoint_arrays(result["checkpoint"], prefixes=("softmax",)))
    assert names == ({"softmax/b/.ATTRIBUTES/VARIABLE_VALUE"} if extra.get("share_embedding_softmax") else
                     {"softmax/b/.ATTRIBUTES/VARIABLE_VALUE", "softmax/W/.ATTRIBUTES/VARIABLE_VALUE"})


# === The model and the step ===

def test_training_layout_matches_the_prediction_layout():
    """The backward stack reading the reversed stream left to right equals the
    prediction layout's backward stack reading the window right to left."""
    options = tiny_options()
    lm = TrainingLM(*training_settings(options))
    prediction = build_bilm(lm.options, layout="prediction")
    prediction.set_weights(lm.bilm.get_weights())
    ids = tf.constant(np.random.default_rng(0).integers(0, 261, size=(3, 6, MAX_CHARS)), tf.int32)
    zeros = lm.zero_states(3)
    reference = prediction({"token_characters": ids, **zeros})
    tops, finals = lm.run({"token_characters": ids, "token_characters_reverse": ids[:, ::-1]}, zeros)
    np.testing.assert_allclose(tops["forward"].numpy(), reference["forward_1"].numpy(), atol=1e-6)
    np.testing.assert_allclose(tops["backward"].numpy()[:, ::-1], reference["backward_1"].numpy(), atol=1e-6)
    for key, value in finals.items():
        np.testing.assert_allclose(value.numpy(), reference[f"final_{key}"].numpy(), atol=1e-6)
    assert np.abs(reference["backward_1"].numpy()).max() > 0.01


def test_dropout_masks_follow_the_seed():
    options = tiny_options(dropout=0.5)
    lm = TrainingLM(*training_settings(options))
    ids = tf.constant(np.random.default_rng(0).integers(0, 261, size=(2, 5, MAX_CHARS)), tf.int32)
    batch = {"token_characters": ids, "token_characters_reverse": ids[:, ::-1]}
    zeros = lm.zero_states(2)
    seed = tf.constant([1, 2], tf.int64)
    first, _ = lm.run(batch, zeros, training=True, dropout_seed=seed)
    again, _ = lm.run(batch, zeros, training=True, dropout_seed=seed)
    other, _ = lm.run(batch, zeros, training=True, dropout_seed=tf.constant([1, 3], tf.int64))
    plain, _ = lm.run(batch, zeros, training=False)
    np.testing.assert_array_equal(first["forward"].numpy(), again["forward"].numpy())
    assert not np.allclose(first["forward"].numpy(), other["forward"].numpy())
    assert not np.allclose(first["forward"].numpy(), plain["forward"].numpy())


def _cross_entropy(top, weights, biases, labels):
    logits = top.reshape(-1, top.shape[-1]) @ weights.T.astype(np.float64) + biases
    logits -= logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(logits.shape[0]), labels.reshape(-1)].mean()


def test_full_softmax_evaluation_matches_numpy_with_carried_states(tmp_path):
    options = tiny_options()
    lm = TrainingLM(*training_settings(options))
    weights = R.write_random_weights(str(tmp_path / "w.hdf5"), options, seed=3)
    load_bilm_weights(lm.bilm, str(tmp_path / "w.hdf5"))
    rng = np.random.default_rng(1)
    n_vocab, p = options["n_tokens_vocab"], options["lstm"]["projection_dim"]
    softmax_w = rng.normal(size=(n_vocab, p)).astype(np.float32)
    softmax_b = rng.normal(size=n_vocab).astype(np.float32)
    lm.softmax_weights.assign(softmax_w)
    lm.softmax_bias.assign(softmax_b)

    states = lm.zero_states(3)
    reference_states = R.zero_states(options, 3)
    for _ in range(2):
        batch = {key: rng.integers(0, 261, size=(3, 4, MAX_CHARS)).astype(np.int32)
                 for key in ("token_characters", "token_characters_reverse")}
        batch.update({key: rng.integers(0, n_vocab, size=(3, 4)).astype(np.int32)
                      for key in ("next_token_id", "next_token_id_reverse")})
        loss, per_direction, states = lm.evaluation_step(batch, states)

        # NumPy: prediction ids are shifted by one; the backward stack reads
        # the reversed-token stream left to right (flip it for the oracle).
        out_f = R.bilm_forward(weights, options, batch["token_characters"] + 1, reference_states)
        out_b = R.bilm_forward(weights, options, batch["token_characters_reverse"][:, ::-1] + 1,
                               reference_states)
        reference_states = {
            key: (out_f if key[0] == 0 else out_b)["final_states"][key] for key in reference_states}
        forward = _cross_entropy(out_f["layers"][-1][..., :p], softmax_w, softmax_b, batch["next_token_id"])
        backward = _cross_entropy(out_b["layers"][-1][..., p:][:, ::-1], softmax_w, softmax_b,
                                  batch["next_token_id_reverse"])
        np.testing.assert_allclose(float(per_direction["forward"]), forward, rtol=1e-5)
        np.testing.assert_allclose(float(per_direction["backward"]), backward, rtol=1e-5)
        np.testing.assert_allclose(float(loss), (forward + backward) / 2, rtol=1e-5)


def test_sparse_adagrad_and_clipping_match_dense_tf1_adagrad():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 3)).astype(np.float32)
    dense_grad = rng.normal(size=(4, 3)).astype(np.float32)
    indices = np.array([7, 2, 7, 40])  # a repeated row, as gathers produce
    values = rng.normal(size=(4, 3)).astype(np.float32)
    sparse = deduplicate(tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant([50, 3])))
    assert sorted(sparse.indices.numpy().tolist()) == [2, 7, 40]
    (clipped_sparse, clipped_dense), norm = clip_by_global_norm([sparse, tf.constant(dense_grad)], 1.5)
    dense_sparse = tf.convert_to_tensor(tf.IndexedSlices(tf.constant(values), tf.constant(indices), [50, 3]))
    reference, reference_norm = tf.clip_by_global_norm([dense_sparse, dense_grad], 1.5)
    assert isinstance(clipped_sparse, tf.IndexedSlices)
    np.testing.assert_allclose(float(norm), float(reference_norm), rtol=1e-6)
    np.testing.assert_allclose(tf.convert_to_tensor(clipped_sparse).numpy(), reference[0].numpy(), atol=1e-6)

    variables = {"table": tf.Variable(table), "dense": tf.Variable(np.ones((4, 3), np.float32))}
    optimizer = SparseAdagrad(variables, learning_rate=0.2, initial_accumulator_value=1.0)
    optimizer.apply(variables, {"table": clipped_sparse, "dense": clipped_dense})
    for name, grad, start in (("table", reference[0].numpy(), table), ("dense", reference[1].numpy(), 1.0)):
        accumulator = 1.0 + grad ** 2  # TF1 AdagradOptimizer, no epsilon
        np.testing.assert_allclose(optimizer.accumulators[name].numpy(), accumulator, rtol=1e-6)
        np.testing.assert_allclose(variables[name].numpy(), start - 0.2 * grad / np.sqrt(accumulator), atol=1e-6)
    untouched = np.setdiff1d(np.arange(50), indices)
    assert np.array_equal(variables["table"].numpy()[untouched], table[untouched])


@pytest.mark.parametrize("clip_norm", [100.0, 0.5])  # not clipping, clipping
def test_global_norm_scale_of_replica_sums_is_that_of_their_mean(clip_norm):
    rng = np.random.default_rng(2)
    sums = [tf.constant(rng.normal(size=(4, 3)), tf.float32),
            tf.IndexedSlices(tf.constant(rng.normal(size=(2, 3)), tf.float32), tf.constant([5, 1]), [9, 3])]
    scale, norm = global_norm_scale(sums, clip_norm, summed_over=4)
    means = [sums[0] / 4, tf.IndexedSlices(sums[1].values / 4, sums[1].indices, sums[1].dense_shape)]
    clipped, reference_norm = clip_by_global_norm(means, clip_norm)
    np.testing.assert_allclose(float(norm), float(reference_norm), rtol=1e-6)
    np.testing.assert_allclose((sums[0] * scale).numpy(), clipped[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose((sums[1].values * scale).numpy(), clipped[1].values.numpy(), rtol=1e-6)


def test_adagrad_gradient_scale_equals_scaled_gradients_and_zero_skips_non_finite_ones():
    rng = np.random.default_rng(1)
    table, dense = rng.normal(size=(9, 3)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    sparse = tf.IndexedSlices(tf.constant(rng.normal(size=(2, 3)), tf.float32), tf.constant([5, 1]), [9, 3])
    dense_grad = tf.constant(rng.normal(size=(4, 3)), tf.float32)

    def applied(gradients, gradient_scale):
        variables = {"table": tf.Variable(table), "dense": tf.Variable(dense)}
        optimizer = SparseAdagrad(variables, learning_rate=0.2)
        optimizer.apply(variables, gradients, gradient_scale=gradient_scale)
        return [v.numpy() for v in variables.values()] + [a.numpy() for a in optimizer.accumulators.values()]

    scale = tf.constant(0.37)
    inside = applied({"table": sparse, "dense": dense_grad}, scale)
    before = applied({"table": scale_gradient(sparse, scale), "dense": dense_grad * scale}, 1.0)
    unscaled = applied({"table": sparse, "dense": dense_grad}, 1.0)
    for a, b in zip(inside, before):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(inside[1], unscaled[1])

    nan = np.full((2, 3), np.nan, np.float32)
    skipped = applied({"table": tf.IndexedSlices(tf.constant(nan), sparse.indices, [9, 3]),
                       "dense": tf.constant(np.full((4, 3), np.inf, np.float32))}, tf.constant(0.0))
    for got, start in zip(skipped, [table, dense, np.ones((9, 3)), np.ones((4, 3))]):
        np.testing.assert_array_equal(got, start)


def test_a_step_never_touches_the_whole_softmax_table():
    # A vocabulary of 10007 rows (a number no other tensor of the step has):
    # no op of the compiled step may produce a tensor with that many rows.
    n_vocab = 10007
    options = tiny_options(n_tokens_vocab=n_vocab, n_negative_samples_batch=64)
    _, settings = training_settings(options)
    lm = TrainingLM(load_options(options), settings)
    optimizer = SparseAdagrad(lm.trainable_variables(), 0.2)
    states = {key: tf.Variable(tf.zeros([16, size])) for key, _, size in lm.state_keys}
    step = TrainStep(lm, optimizer, states, tf.distribute.get_strategy(), settings, seed=0)
    rng = np.random.default_rng(0)
    batch = {key: tf.constant(rng.integers(0, 261, size=(16, 5, MAX_CHARS)), tf.int32)
             for key in ("token_characters", "token_characters_reverse")}
    batch.update({key: tf.constant(rng.integers(0, 30, size=(16, 5)), tf.int32)
                  for key in ("next_token_id", "next_token_id_reverse")})
    before = lm.softmax_weights.numpy()
    outputs = step(batch, 0)
    assert np.isfinite(float(outputs["loss"]))
    changed = np.flatnonzero(np.any(lm.softmax_weights.numpy() != before, axis=1))
    assert 0 < len(changed) <= 16 * 5 * 2 + 2 * 64
    graph = step.function.get_concrete_function(batch, tf.constant(0, tf.int64)).graph
    big = [op.name for op in graph.get_operations() for t in op.outputs
           if t.shape.rank and t.shape[0] == n_vocab and op.type != "VarHandleOp"]
    assert not big, big


def test_progress_parameter_count_and_tensorboard_scalars(tmp_path, corpus, capsys):
    options = tiny_options()
    train(options, open_data(options, corpus), 1, tmp_path / "ckpt", str(tmp_path / "logs"), max_steps=10,
          summary_every=5, heldout_data=open_data(options, corpus, test=True), heldout_every=10,
          heldout_batch_size=8, verbose=1)
    out = capsys.readouterr().out
    n_bilm, n_softmax = TrainingLM(*training_settings(options)).parameter_counts()
    assert f"Parameters: {n_bilm:,} in the biLM, {n_softmax:,} in the softmax" in out
    assert n_softmax == 23 * 8 + 23
    assert "Memory estimate" in out and "Adagrad accumulators" in out
    # Readable numbers, no colour codes in a file (capsys is not a terminal).
    assert re.search(r"ms/batch - perplexity [0-9.]+ - tokens/sec [0-9,]+\n", out) and "\x1b" not in out
    assert re.search(r"Step 10: held-out perplexity [0-9.]+", out)
    tags = set()
    for event_file in tf.io.gfile.glob(str(tmp_path / "logs" / "events*")):
        for record in tf.data.TFRecordDataset(event_file):
            from tensorflow.core.util import event_pb2
            event = event_pb2.Event.FromString(record.numpy())
            tags.update(value.tag for value in event.summary.value)
    assert {"train_perplexity", "gradient_norm", "learning_rate", "heldout_perplexity"} <= tags


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, corpus, capsys):
    options = tiny_options(learning_rate=1e36, sample_softmax=False)
    with pytest.raises(FloatingPointError, match="no checkpoint was saved before it; train again with a lower"):
        train(options, open_data(options, corpus), 1, tmp_path / "first", None, checkpoint_every=1000, verbose=1)
    assert capsys.readouterr().out.endswith("\n")  # the progress line is ended before the error
    save_dir = tmp_path / "ckpt"
    with pytest.raises(FloatingPointError, match="last good checkpoint is .*model.ckpt-") as error:
        train(options, open_data(options, corpus), 1, save_dir, None, checkpoint_every=1, verbose=0)
    failed_step = int(re.search(r"stopped at step (\d+)", str(error.value)).group(1))
    latest = tf.train.latest_checkpoint(str(save_dir))
    assert latest.endswith(f"model.ckpt-{failed_step - 1}")
    arrays = checkpoint_arrays(latest)
    assert all(np.all(np.isfinite(a)) for a in arrays.values() if a.dtype.kind == "f")


# === Dumping weights for prediction ===

@pytest.mark.parametrize("char", [True, False])
def test_dumped_weights_load_in_bidirectional_language_model(tmp_path, corpus, char):
    options = tiny_options(char=char)
    save_dir = tmp_path / "ckpt"
    train(options, open_data(options, corpus), 1, save_dir, None, max_steps=3, verbose=0)
    with pytest.raises(CheckpointError, match="already holds checkpoints.*restart"):
        train(options, open_data(options, corpus), 1, save_dir, None, max_steps=1, verbose=0)
    written = dump_weights(str(save_dir), str(save_dir / "weights.hdf5"))
    prediction = load_options(written["options_file"])
    lm = load_training_model(str(save_dir / "options.json"), tf.train.latest_checkpoint(str(save_dir)))

    sentences = [WORDS[0:4], WORDS[5:9], WORDS[16:20]]  # same length: full rows for padded=False
    if char:
        assert prediction.char_cnn.n_characters == 262
        shifted = Batcher(corpus["vocab"], MAX_CHARS).batch_sentences(sentences)
        model = BidirectionalLanguageModel(written["options_file"], written["weight_file"], stateful=False)
        inputs = {"token_characters": tf.constant(shifted - 1),
                  "token_characters_reverse": tf.constant(shifted[:, ::-1] - 1)}
    else:
        assert prediction.char_cnn is None
        shifted = TokenBatcher(corpus["vocab"]).batch_sentences(sentences)
        model = BidirectionalLanguageModel(
            written["options_file"], written["weight_file"], use_character_inputs=False,
            embedding_weight_file=written["embedding_weight_file"], stateful=False)
        inputs = {"token_ids": tf.constant(shifted - 1), "token_ids_reverse": tf.constant(shifted[:, ::-1] - 1)}
    assert shifted.min() > 0
    # Training ids are the prediction ids minus one (no padding row); the
    # backward stack reads the reversed window, its outputs in that order.
    reference = lm.bilm({**inputs, **lm.zero_states(len(sentences))})
    out = model(shifted)
    p = prediction.projection_dim
    np.testing.assert_allclose(out["token_embeddings"].numpy(), reference["token_embeddings"].numpy(), atol=1e-5)
    for layer in range(prediction.n_layers):
        top = out["lm_embeddings"].numpy()[:, layer + 1]
        np.testing.assert_allclose(top[..., :p], reference[f"forward_{layer}"].numpy()[:, 1:-1], atol=1e-5)
        np.testing.assert_allclose(top[..., p:], reference[f"backward_{layer}"].numpy()[:, ::-1][:, 1:-1],
                                   atol=1e-5)
    assert np.abs(out["lm_embeddings"].numpy()).max() > 0.01


# === Scripts and errors ===

def _script(name):
    spec = importlib.util.spec_from_file_location(f"bin_{name}", os.path.join(ROOT, "bin", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scripts_train_restart_test_and_dump(tmp_path, capsys):
    corpus = write_corpus(tmp_path, n_train=200, n_heldout=60)
    options_file = tmp_path / "options.json"
    options = tiny_options()
    del options["n_train_tokens"]
    options_file.write_text(__import__("json").dumps(options))
    save_dir = str(tmp_path / "ckpt")
    common = ["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"], "--save_dir", save_dir,
              "--batch_size", "8"]

    first = _script("train_elmo").main(common + ["--options_file", str(options_file), "--n_epochs", "1",
                                                 "--heldout_prefix", corpus["heldout"],
                                                 "--matmul_dtype", "bfloat16"])
    n_tokens = count_tokens(corpus["train"])
    saved = load_options(os.path.join(save_dir, "options.json"))
    assert saved.get("n_train_tokens") == n_tokens and saved.get("matmul_dtype") == "bfloat16"
    steps_per_epoch = n_tokens // (8 * 5)
    assert first["step"] == steps_per_epoch and first["heldout_perplexity"] > 1
    out = capsys.readouterr().out
    assert "Counted" in out and "take bfloat16 operands in training steps" in out

    second = _script("restart").main(common + ["--n_epochs", "2"])
    assert second["step"] == 2 * steps_per_epoch
    capsys.readouterr()
    again = _script("restart").main(common + ["--n_epochs", "2"])
    assert again["step"] == 2 * steps_per_epoch and again["steps_taken"] == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"Nothing to train: the run in {save_dir} has finished its 2 epoch(s) (step {2 * steps_per_epoch}). To "
        "train longer on the same data, rerun bin/restart.py with a larger --n_epochs (e.g. --n_epochs 4); to "
        "fine-tune on other text, pass its shards as --train_prefix.")

    perplexity = _script("run_test").main(["--test_prefix", corpus["heldout"], "--vocab_file", corpus["vocab"],
                                           "--save_dir", save_dir, "--batch_size", "4"])
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"AVERAGE PERPLEXITY = [0-9]+\.[0-9]+", last_line)
    assert abs(float(last_line.split("=")[1]) - perplexity) < 1e-3

    notes = tmp_path / "notes.hdf5"
    notes.write_text("not bilm's")
    for outfile, message in [(os.path.join(save_dir, "options.json"), "is the input .*options.json"),
                             (str(notes), "notes.hdf5 already exists and is not a file that bilm wrote"),
                             (str(notes / "weights.hdf5"), "notes.hdf5: it is a file, not a directory")]:
        with pytest.raises(SystemExit, match=message):
            _script("dump_weights").main(["--save_dir", save_dir, "--outfile", outfile])
    assert notes.read_text() == "not bilm's"
    written = _script("dump_weights").main(
        ["--save_dir", save_dir, "--outfile", os.path.join(save_dir, "weights.hdf5")])
    model = BidirectionalLanguageModel(written["options_file"], written["weight_file"])
    out = model(Batcher(corpus["vocab"], MAX_CHARS).batch_sentences([["alpha", "bravo"]]))
    assert out["lm_embeddings"].shape == (1, 3, 2, 16)
    assert load_options(os.path.join(save_dir, "options.json")).char_cnn.n_characters == 261


@pytest.mark.parametrize("script, args", [
    ("restart", ["--train_prefix", "x", "--vocab_file", "v"]),
    ("run_test", ["--test_prefix", "x", "--vocab_file", "v"]),
    ("dump_weights", ["--outfile", "w.hdf5"]),
])
def test_scripts_without_a_checkpoint_are_clear_errors(tmp_path, script, args):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="No checkpoint found in .*empty"):
        _script(script).main(args + ["--save_dir", str(tmp_path / "empty")])
    with pytest.raises(SystemExit, match="does not exist"):
        _script(script).main(args + ["--save_dir", str(tmp_path / "missing")])


def test_training_options_with_prediction_characters_is_a_clear_script_error(tmp_path, corpus):
    options = tiny_options()
    options["char_cnn"]["n_characters"] = 262
    options_file = tmp_path / "options.json"
    options_file.write_text(__import__("json").dumps(options))
    with pytest.raises(SystemExit, match=f"Error: {options_file}: 'char_cnn.n_characters' is 262.*needs 261"):
        _script("train_elmo").main(["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"],
                                    "--save_dir", str(tmp_path / "ckpt"), "--options_file", str(options_file)])
    options = tiny_options(dropout=2.0)
    options_file.write_text(__import__("json").dumps(options))
    with pytest.raises(SystemExit, match=f"Error: {options_file}: training key 'dropout' must be a number"):
        _script("train_elmo").main(["--train_prefix", corpus["train"], "--vocab_file", corpus["vocab"],
                                    "--save_dir", str(tmp_path / "ckpt"), "--options_file", str(options_file)])
