"""prediction_network: the trained biLM in the prediction layout; measure_boundary_state on its training text."""
import numpy as np
import pytest
import tensorflow as tf

import bilm.training.model.boundary_state_measure as prediction_network_module
from bilm.text.batching import Batcher
from bilm.training.config.settings import training_settings
from tensorflow_reference.boundary_state_measure import measure_boundary_state, prediction_network
from tensorflow_reference.training_lm import TrainingLM
from training_helpers import MAX_CHARS, WORDS, open_data, tiny_options, write_corpus


@pytest.mark.parametrize("char", [True, False])
def test_the_prediction_network_computes_what_the_training_model_does(char):
    """Prediction ids are the training ids + 1 (0 is padding); its backward stack reads each row right to
    left, the training one the reversed stream left to right."""
    options = tiny_options(char=char)
    lm = TrainingLM(*training_settings(options))
    rng = np.random.default_rng(0)
    if char:
        key, ids = "token_characters", rng.integers(0, 261, size=(3, 5, MAX_CHARS))
    else:
        key, ids = "token_ids", rng.integers(0, options["n_tokens_vocab"], size=(3, 5))
        # Token inputs: the trained table with a zero padding row in front.
        lm.layers["token_embedding"].embeddings.assign(rng.normal(size=lm.layers["token_embedding"].embeddings.shape))
    ids = tf.constant(ids, tf.int32)
    network = prediction_network(lm)
    zeros = lm.zero_states(3)
    outputs = network({key: ids + 1, **zeros})
    tops, finals = lm.run({key: ids, key + "_reverse": ids[:, ::-1]}, zeros)
    np.testing.assert_allclose(outputs["forward_1"].numpy(), tops["forward"].numpy(), atol=1e-6)
    np.testing.assert_allclose(outputs["backward_1"].numpy(), tops["backward"].numpy()[:, ::-1], atol=1e-6)
    for state, value in finals.items():
        np.testing.assert_allclose(outputs[f"final_{state}"].numpy(), value.numpy(), atol=1e-6)
    assert np.abs(tops["backward"].numpy()).max() > 0.01
    if not char:
        table = network.get_layer("token_embedding").embeddings.numpy()
        np.testing.assert_array_equal(table[0], 0.0)
        np.testing.assert_array_equal(table[1:], lm.layers["token_embedding"].embeddings.numpy())


@pytest.mark.parametrize("char", [True, False])
def test_the_boundary_state_is_measured_on_the_text_from_its_beginning_and_stored(tmp_path, monkeypatch, char):
    """What measure_boundary_state hands to compute_boundary_state (tested against NumPy in
    tests/models/test_boundary_state.py), and what it keeps of the result."""
    corpus = write_corpus(tmp_path, n_train=6, n_heldout=12)
    options = tiny_options(char=char)
    lm = TrainingLM(*training_settings(options))
    calls = []

    def compute(network, options, sentences, to_ids, n_sentences, bidirectional):
        sentences = list(sentences)
        calls.append((network, options, sentences, to_ids, n_sentences, bidirectional))
        return {key: np.full([size], i + 0.5, np.float32) for i, (key, _, size) in enumerate(lm.state_keys)}, 7

    monkeypatch.setattr(prediction_network_module, "compute_boundary_state", compute)
    assert measure_boundary_state(lm, open_data(options, corpus, test=True), n_sentences=3) == 7
    ((network, got_options, sentences, to_ids, n_sentences, bidirectional),) = calls
    assert network.name == "prediction_bilm" and got_options is lm.options
    assert (n_sentences, bidirectional) == (3, True)
    with open(corpus["heldout"]) as f:
        text = [line.split() for line in f]
    assert len(sentences) >= 3 and sentences == text[:len(sentences)]  # the text from its beginning
    batch = [text[0], text[1][:2]]
    if char:
        np.testing.assert_array_equal(to_ids(batch), Batcher(None, MAX_CHARS).batch_sentences(batch))
    else:  # the training vocabulary's ids with <S> and </S>, shifted by one, 0 padding
        ids = {word: i for i, word in enumerate(["<S>", "</S>", "<UNK>"] + WORDS)}
        want = np.zeros((2, len(text[0]) + 2), np.int32)
        for row, sentence in enumerate(batch):
            want[row, :len(sentence) + 2] = [ids[w] + 1 for w in ["<S>", *sentence, "</S>"]]
        np.testing.assert_array_equal(to_ids(batch), want)
    assert int(lm.n_boundary_starts.numpy()) == 7
    for i, (key, _, size) in enumerate(lm.state_keys):
        np.testing.assert_array_equal(lm.boundary_state[key].numpy(), np.full([size], i + 0.5))


def test_a_short_text_counts_each_sentence_start_once(tmp_path):
    # The training stream of 6 sentences cycles forever; the measure reads it once.
    corpus = write_corpus(tmp_path, n_train=6, n_heldout=2, shards=1)
    options = tiny_options()
    lm = TrainingLM(*training_settings(options))
    n_starts = measure_boundary_state(lm, open_data(options, corpus))
    assert 1 <= n_starts <= 6 and int(lm.n_boundary_starts.numpy()) == n_starts
