"""TokenEncodingCache: each distinct token encoded once, bounded memory, same values, from any thread."""
import sys
import threading
import time

import numpy as np
import pytest

from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.token_cache import TokenEncodingCache
from bilm.text.batching import Batcher
from helpers import SENTENCES, write_model


class CountingEncoder:
    """A made-up per-token encoder that records how many tokens it saw."""

    def __init__(self, dim=3):
        self.weights = np.random.default_rng(0).normal(size=(7, dim)).astype(np.float32)
        self.calls = []

    def __call__(self, char_ids):
        self.calls.append(len(char_ids))
        return np.tanh(char_ids.astype(np.float32) @ self.weights)


def _ids(sentences):
    return Batcher(None, 7).batch_sentences(sentences)


def _cache_and_expected(max_size):
    """A cache over a fresh CountingEncoder, SENTENCES' ids, the encodings
    they should get, and how many distinct tokens they hold."""
    encoder = CountingEncoder()
    ids = _ids(SENTENCES)
    expected = encoder(ids.reshape(-1, 7)).reshape(ids.shape[:2] + (3,))
    encoder.calls.clear()
    n_distinct = len(np.unique(ids.reshape(-1, 7), axis=0))
    return TokenEncodingCache(encoder, 3, max_size=max_size), encoder, ids, expected, n_distinct


def test_encodings_match_the_encoder_and_each_token_is_encoded_once():
    cache, encoder, ids, expected, n_distinct = _cache_and_expected(max_size=100)
    out = cache.encodings(ids)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert encoder.calls == [n_distinct] and len(cache) == n_distinct
    np.testing.assert_array_equal(cache.encodings(ids[::-1]), out[::-1])
    assert encoder.calls == [n_distinct]  # the second call encoded nothing
    assert cache.hits == n_distinct and cache.misses == n_distinct


def test_a_cleared_cache_encodes_every_token_again():
    cache, encoder, ids, expected, n_distinct = _cache_and_expected(max_size=100)
    cache.encodings(ids)
    cache.clear()
    assert len(cache) == 0 and cache.hits == cache.misses == 0
    np.testing.assert_allclose(cache.encodings(ids), expected, rtol=1e-6)
    assert encoder.calls == [n_distinct, n_distinct] and cache.misses == n_distinct


def test_a_full_cache_still_gives_every_encoding_but_stores_no_more():
    cache, encoder, ids, expected, n_distinct = _cache_and_expected(max_size=4)
    for _ in range(2):
        np.testing.assert_allclose(cache.encodings(ids), expected, rtol=1e-6)
    assert len(cache) == 4
    assert encoder.calls == [n_distinct, n_distinct - 4]


def test_threads_sharing_a_cache_each_get_their_own_tokens_encodings():
    # Threads whose batches overlap in part: each must get exactly its tokens' encodings, however the
    # threads interleave (an encoder that yields the interpreter, a switch interval of a microsecond).
    encoder = CountingEncoder()

    def slow_encoder(char_ids):
        time.sleep(0.0005)
        return encoder(char_ids)

    cache = TokenEncodingCache(slow_encoder, 3, max_size=10_000)
    rng = np.random.default_rng(0)
    batches = [rng.integers(1, 60, size=(4, 5, 7)).astype(np.int32) for _ in range(64)]
    for batch in batches:
        batch[:, :, 2:] = 0  # few distinct rows, so that the threads meet on the same tokens
    results = [None] * len(batches)

    def run(indices):
        for i in indices:
            results[i] = cache.encodings(batches[i])

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(range(k, len(batches), 8),)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch_interval)
    for batch, result in zip(batches, results):
        np.testing.assert_array_equal(result, encoder(batch.reshape(-1, 7)).reshape(batch.shape[:2] + (3,)))
    assert len(cache) == len(np.unique(np.concatenate([b.reshape(-1, 7) for b in batches]), axis=0))


def test_empty_batches_and_a_zero_size_cache():
    encoder = CountingEncoder()
    cache = TokenEncodingCache(encoder, 3, max_size=0)
    assert cache.encodings(np.zeros([0, 5, 7], np.int32)).shape == (0, 5, 3)
    ids = _ids(SENTENCES[:2])
    cache.encodings(ids)
    assert len(cache) == 0
    with pytest.raises(ValueError, match="max_size"):
        TokenEncodingCache(encoder, 3, max_size=-1)


def test_cached_model_equals_uncached_model_over_overlapping_batches(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    cached = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, token_cache_size=10)
    uncached = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=8, token_cache_size=0)
    batches = [_ids(SENTENCES), _ids(SENTENCES[2:4]), _ids([s[::-1] for s in SENTENCES])]
    for ids in batches:
        a, b = cached(ids), uncached(ids)
        for key in a:
            assert np.abs(a[key].numpy().astype(float) - b[key].numpy()).max() < 1e-5, key
    assert len(cached.token_cache) == 10 and cached.token_cache.hits > 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(token_cache_size=-1), "token_cache_size must be an integer >= 0"),
    (dict(token_cache_size=2.5), "token_cache_size must be an integer >= 0"),
    (dict(max_batch_size=0), "max_batch_size must be >= 1"),
])
def test_bad_model_sizes_are_clear_errors(tmp_path, kwargs, message):
    options_file, weight_file, _ = write_model(tmp_path)
    with pytest.raises(ValueError, match=message):
        BidirectionalLanguageModel(options_file, weight_file, **kwargs)
