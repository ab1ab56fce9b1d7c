"""prediction_network: the trained biLM in the prediction layout; measure_boundary_state on its training text."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.models.boundary_state import compute_boundary_state
from bilm.text.batching import Batcher
from bilm.training.prediction_network import measure_boundary_state, prediction_network
from bilm.training.settings import training_settings
from bilm.training.training_lm import TrainingLM
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


def test_the_boundary_state_is_measured_on_the_text_from_its_beginning(tmp_path):
    corpus = write_corpus(tmp_path, n_train=6)
    # Sentences of one length: each step of the measurement has the same shapes (one trace).
    with open(corpus["heldout"], "w") as f:
        f.writelines(" ".join(WORDS[i:i + 4]) + "\n" for i in range(6))
    options = tiny_options()
    lm = TrainingLM(*training_settings(options))
    n_starts = measure_boundary_state(lm, open_data(options, corpus, test=True))
    with open(corpus["heldout"]) as f:
        sentences = [line.split() for line in f]
    want, n_want = compute_boundary_state(prediction_network(lm), lm.options, sentences,
                                          Batcher(None, MAX_CHARS).batch_sentences)
    assert n_starts == int(lm.n_boundary_starts.numpy()) == n_want and 0 < n_starts <= len(sentences)
    assert want.keys() == lm.boundary_state.keys()
    for key, variable in lm.boundary_state.items():
        np.testing.assert_allclose(variable.numpy(), want[key], atol=1e-6, err_msg=key)
    assert max(np.abs(v.numpy()).max() for v in lm.boundary_state.values()) > 0.01
