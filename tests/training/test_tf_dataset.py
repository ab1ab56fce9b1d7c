"""make_tf_dataset: the tf.data elements equal LMDataset's batches, with the keys and skip asked for."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.text.vocabulary import Vocabulary
from bilm.training.data.lm_dataset import BidirectionalLMDataset, LMDataset
from helpers import write_vocab
from tensorflow_reference.tf_dataset import make_tf_dataset
from training_helpers import TOKENS, C


def test_make_tf_dataset_bidirectional_chars(corpus, vocab):
    data = BidirectionalLMDataset(corpus, vocab, test=True)
    dataset = make_tf_dataset(data, 2, 3)
    spec = dataset.element_spec
    assert set(spec) == {
        "token_ids", "token_characters", "next_token_id",
        "token_ids_reverse", "token_characters_reverse", "next_token_id_reverse",
    }
    assert spec["token_characters_reverse"].shape == (2, 3, C)
    assert spec["token_ids"].shape == (2, 3) and spec["token_ids"].dtype == tf.int32
    elements = list(dataset)
    expected = list(data.iter_batches(2, 3))
    assert len(elements) == len(expected) == 2
    for element, batch in zip(elements, expected):
        for key, value in element.items():
            assert value.dtype == tf.int32
            np.testing.assert_array_equal(value.numpy(), batch[key])


def test_make_tf_dataset_tokens_only_training(corpus, tmp_path):
    vocab = Vocabulary(write_vocab(tmp_path, TOKENS))
    dataset = make_tf_dataset(LMDataset(corpus, vocab, seed=0), 4, 5)
    assert set(dataset.element_spec) == {"token_ids", "next_token_id"}
    elements = list(dataset.take(6))  # more than one pass over the data
    assert len(elements) == 6
    assert all(e["next_token_id"].shape == (4, 5) for e in elements)


def test_make_tf_dataset_keys_and_skip(corpus, vocab):
    data = BidirectionalLMDataset(corpus, vocab, test=True)
    expected = list(data.iter_batches(2, 3))
    dataset = make_tf_dataset(data, 2, 3, keys=["token_ids", "next_token_id_reverse"], skip=1)
    assert set(dataset.element_spec) == {"token_ids", "next_token_id_reverse"}
    elements = list(dataset)
    assert len(elements) == len(expected) - 1
    np.testing.assert_array_equal(elements[0]["token_ids"].numpy(), expected[1]["token_ids"])


def test_make_tf_dataset_names_missing_keys(corpus, tmp_path):
    data = LMDataset(corpus, Vocabulary(write_vocab(tmp_path, TOKENS)), test=True)
    with pytest.raises(ValueError, match=r"lack \['token_characters'\].*max_word_length"):
        make_tf_dataset(data, 2, 3, keys=["token_characters", "next_token_id"])


def test_make_tf_dataset_prefetches_without_autotuning(corpus, vocab):
    # Leaving an autotuned iterator before its end waited for tf.data's
    # tuning thread (seconds, at the end of every training call).
    dataset = make_tf_dataset(BidirectionalLMDataset(corpus, vocab, seed=0), 2, 3)
    assert dataset.options().autotune.enabled is False
