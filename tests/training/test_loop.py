"""train: the schedule's errors, convergence, progress and TensorBoard output, a non-finite loss."""
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import bilm.training.run.loop as loop_module
from bilm.errors import UserError
from bilm.training.config.settings import training_settings
from bilm.training.run.loop import train
from tensorflow_reference.evaluation import evaluate_lm
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import checkpoint_arrays, checkpoint_numbers, open_data, tiny_options, unigram_perplexity


@pytest.mark.slow  # over 3 s on two busy cores
def test_n_train_tokens_below_one_batch_trains_one_batch_per_epoch_and_says_so(tmp_path, training_corpus):
    options = tiny_options(n_train_tokens=10, n_epochs=2)
    with pytest.warns(UserWarning, match="n_train_tokens \\(10\\) is less than one global batch.*one batch"):
        result = train(options, open_data(options, training_corpus), 1, tmp_path / "ckpt", None, verbose=0)
    assert result["step"] == 2 and result["finished"]


# Char inputs without skip connections learn too, but this toy configuration
# needs about 800 steps for it; the float32 runs cover each setting both
# ways, and the bfloat16 matmuls learn as well. The default configuration
# learns on JAX (test_jax_training.py): the one step, written once.
@pytest.mark.slow
@pytest.mark.parametrize("char, bidirectional, skip, steps, extra", [
    (True, True, True, 250, {"matmul_dtype": "bfloat16"}),
    (True, False, True, 250, {}),
    (False, True, False, 250, {"learning_rate": 0.5}),
    (False, False, True, 150, {"share_embedding_softmax": True}),
    (True, True, True, 250, {"optimizer": "adam", "learning_rate": 0.01}),
])
def test_training_goes_far_below_unigram_perplexity(tmp_path, training_corpus, char, bidirectional, skip, steps, extra):
    options = tiny_options(char=char, bidirectional=bidirectional, skip=skip, n_train_tokens=16 * 5 * steps,
                           **extra)
    heldout = open_data(options, training_corpus, test=True)
    lm_before = TrainingLM(*training_settings(options))
    before = evaluate_lm(lm_before, heldout, batch_size=8)["perplexity"]
    result = train(options, open_data(options, training_corpus), 1, tmp_path / "ckpt", None,
                   heldout_data=heldout, heldout_batch_size=8, verbose=0)
    unigram = unigram_perplexity(training_corpus)
    assert 15 < unigram < 25 and before > unigram
    assert result["step"] == steps
    assert result["heldout_perplexity"] < 0.4 * unigram, (result, unigram)
    names = set(checkpoint_arrays(result["checkpoint"], prefixes=("softmax",)))
    assert names == ({"softmax/b/.ATTRIBUTES/VARIABLE_VALUE"} if extra.get("share_embedding_softmax") else
                     {"softmax/b/.ATTRIBUTES/VARIABLE_VALUE", "softmax/W/.ATTRIBUTES/VARIABLE_VALUE"})


@pytest.mark.slow
def test_progress_parameter_count_and_tensorboard_scalars(tmp_path, training_corpus, capsys):
    options = tiny_options()
    train(options, open_data(options, training_corpus), 1, tmp_path / "ckpt", str(tmp_path / "logs"), max_steps=10,
          summary_every=5, heldout_data=open_data(options, training_corpus, test=True), heldout_every=10,
          heldout_batch_size=8, verbose=1)
    out = capsys.readouterr().out
    n_bilm, n_softmax = TrainingLM(*training_settings(options)).parameter_counts()
    assert f"Parameters: {n_bilm:,} in the biLM, {n_softmax:,} in the softmax" in out
    assert n_softmax == 23 * 8 + 23
    assert "Memory estimate" in out and "adagrad state" in out
    # Readable numbers, no colour codes in a file (capsys is not a terminal).
    # The training loss's perplexity is named as such, and told apart from the held-out one.
    assert re.search(r"[0-9](s|ms|us)/batch - (sampled-softmax|training) perplexity [0-9.]+ - tokens/sec [0-9,]+\n",
                     out)
    assert "\x1b" not in out and "not comparable with the held-out perplexity" in out
    assert re.search(r"Step 10: held-out perplexity [0-9.]+", out)
    tags = set()
    for event_file in tf.io.gfile.glob(str(tmp_path / "logs" / "events*")):
        for record in tf.data.TFRecordDataset(event_file):
            from tensorflow.core.util import event_pb2
            event = event_pb2.Event.FromString(record.numpy())
            tags.update(value.tag for value in event.summary.value)
    assert {"train_perplexity", "gradient_norm", "learning_rate", "heldout_perplexity"} <= tags


@pytest.mark.slow
def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path, training_corpus, capsys):
    options = tiny_options(learning_rate=1e36, sample_softmax=False)
    with pytest.raises(FloatingPointError, match="no checkpoint was saved before it; train again with a lower"):
        train(options, open_data(options, training_corpus), 1, tmp_path / "first", None, checkpoint_every=1000,
              verbose=1)
    assert capsys.readouterr().out.endswith("\n")  # the progress line is ended before the error
    save_dir = tmp_path / "ckpt"
    with pytest.raises(FloatingPointError, match="last good checkpoint is .*checkpoint.npz") as error:
        train(options, open_data(options, training_corpus), 1, save_dir, None, checkpoint_every=1, verbose=0)
    failed_step = int(re.search(r"stopped at step (\d+)", str(error.value)).group(1))
    latest = str(save_dir / "checkpoint.npz")
    assert checkpoint_numbers(save_dir)[-1] == failed_step - 1
    arrays = checkpoint_arrays(latest)
    assert all(np.all(np.isfinite(a)) for a in arrays.values() if a.dtype.kind == "f")


@pytest.mark.parametrize("tune_malloc", [False, True])
def test_malloc_is_tuned_only_when_the_caller_asks(tmp_path, training_corpus, monkeypatch, tune_malloc):
    calls = []
    monkeypatch.setattr(loop_module, "keep_freed_memory", lambda: calls.append(1))
    options = tiny_options()
    # A save_dir that is a file stops the run right after malloc's turn, before any step.
    (tmp_path / "ckpt").write_text("a file")
    with pytest.raises(UserError, match="ckpt"):
        train(options, open_data(options, training_corpus), 1, tmp_path / "ckpt", None, max_steps=1, verbose=0,
              tune_malloc=tune_malloc)
    assert len(calls) == int(tune_malloc)


def test_a_global_mixed_precision_policy_is_refused_before_any_work(tmp_path, training_corpus):
    options = tiny_options()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        with pytest.raises(UserError, match="computes in float32, and the global Keras dtype policy is "
                                            "'mixed_bfloat16'.*matmul_dtype"):
            train(options, open_data(options, training_corpus), 1, tmp_path / "ckpt", None, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert not (tmp_path / "ckpt").exists()


# TensorFlow trains one replica on its default device, and a given strategy's replicas, with the step every
# backend trains with.
@pytest.mark.slow
def test_tensorflow_trains_one_replica_and_a_strategys_replicas_with_the_array_step(
        tmp_path, training_corpus, monkeypatch):
    from bilm.training.arrays.train_step import ArrayTrainStep

    strategies = []
    original = ArrayTrainStep.__call__

    def counted(self, *args, **kwargs):
        strategies.append(self.placement.strategy)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(ArrayTrainStep, "__call__", counted)
    options = tiny_options()
    train(options, open_data(options, training_corpus), 1, tmp_path / "one", None, max_steps=2, verbose=0)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    result = train(options, open_data(options, training_corpus), 1, tmp_path / "given", None, max_steps=2,
                   verbose=0, strategy=strategy)
    assert strategies == [None, None, strategy, strategy] and result["step"] == 2
