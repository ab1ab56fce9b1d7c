"""A sentence's vectors are the same bytes whatever else shares its batch, at a published model's size."""
import numpy as np
import pytest

from bilm import Batcher, BidirectionalLanguageModel, ELMo
from bilm.models.random_weights import write_random_model
from bilm.presets import get_preset

# Lengths from 1 to 30 tokens; words repeat across sentences, as in text (the token cache's hits).
WORDS = ["the", "a", "of", "model", "river", "bank", "money", "flows", "Quickly", "über", "x", "7", "—"]
SENTENCES = [[WORDS[(3 * i + j * j) % len(WORDS)] + ("" if j % 4 else str(i)) for j in range(1 + (7 * i) % 30)]
             for i in range(23)]


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return write_random_model(str(tmp_path_factory.mktemp("small")), get_preset("small"), seed=3)


def _by_batches(model, batch_size):
    batcher, vectors = Batcher(None, 50), []
    for i in range(0, len(SENTENCES), batch_size):
        group = SENTENCES[i:i + batch_size]
        layers = model(batcher.batch_sentences(group))["lm_embeddings"].numpy()
        vectors += [layers[k, :, :len(sentence)] for k, sentence in enumerate(group)]
    return vectors


@pytest.mark.slow
@pytest.mark.parametrize("token_cache_size", [0, 50_000])
def test_batch_size_and_neighbours_do_not_change_a_sentences_bytes(small_model, token_cache_size):
    options_file, weight_file = small_model

    def fresh():
        return BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros",
                                          token_cache_size=token_cache_size)

    expected = _by_batches(fresh(), len(SENTENCES))
    for batch_size in (1, 5, 8):
        got = _by_batches(fresh(), batch_size)
        differing = [i for i, (g, e) in enumerate(zip(got, expected)) if not np.array_equal(g, e)]
        assert not differing, f"batch size {batch_size}: sentences {differing} differ"
    # The bulk path (length-sorted batches of many sentences), with another order of the same sentences.
    elmo = ELMo(options_file, weight_file, start="zeros")
    order = np.random.default_rng(0).permutation(len(SENTENCES))
    bulk = elmo.embed([SENTENCES[i] for i in order], layers="all")
    for position, i in enumerate(order):
        assert np.array_equal(bulk[position], expected[i]), f"sentence {i} in the bulk path"
