"""training_settings: bad training options are errors that name the key and the rule."""
import re

import numpy as np
import pytest

from bilm.options import OptionsError
from bilm.training.config.settings import training_settings
from training_helpers import tiny_options


@pytest.mark.parametrize("change, message", [
    (lambda o: o["char_cnn"].update(n_characters=262), "n_characters' is 262.*needs 261"),
    (lambda o: o.update(share_embedding_softmax=True), "share_embedding_softmax.*token inputs"),
    (lambda o: o.pop("n_tokens_vocab"), "n_tokens_vocab"),
    (lambda o: o.update(dropout=1.5), "dropout"),
    (lambda o: o.update(matmul_dtype="float16"), "'matmul_dtype' must be one of 'float32', 'bfloat16'"),
    (lambda o: o.update(optimizer="sgd"), "'optimizer' must be one of \\['adagrad', 'adam'\\], got 'sgd'"),
    (lambda o: o.update(bidirectional="yes"), "'bidirectional' must be true or false, got \"yes\""),
    (lambda o: o.update(sample_softmax="false"), "'sample_softmax' must be true or false"),
])
def test_bad_training_options_are_clear_errors(change, message):
    options = tiny_options()
    change(options)
    with pytest.raises(OptionsError, match=message):
        training_settings(options)


@pytest.mark.parametrize("change, message", [
    (lambda o: o.update(n_epoch=1), "unknown training option 'n_epoch'. Did you mean 'n_epochs'?"),
    (lambda o: o["lstm"].update(use_skip_conection=False),
     "unknown training option 'lstm.use_skip_conection'. Did you mean 'use_skip_connections'?"),
    (lambda o: o["char_cnn"]["embedding"].update(dims=4), "'char_cnn.embedding.dims'. Did you mean 'dim'?"),
    (lambda o: o.update(zzz=1), "unknown training option 'zzz'. Known keys here: "),
])
def test_a_typo_in_the_training_options_names_the_closest_key(change, message):
    options = tiny_options()
    change(options)
    with pytest.raises(OptionsError, match=re.escape(message)):
        training_settings(options)


def test_loading_a_model_ignores_keys_only_training_knows(tmp_path):
    """Published options files carry keys of their own; prediction never refuses them."""
    from bilm.models import BidirectionalLanguageModel
    from helpers import write_model

    options_file, weight_file, options = write_model(tmp_path)
    ids = np.random.default_rng(0).integers(1, 200, size=(2, 4, options["char_cnn"]["max_characters_per_token"]))
    plain = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")(ids)
    options["n_train_tokens_seen"] = 123
    options["lstm"]["some_publisher_key"] = True
    with_extra_keys = BidirectionalLanguageModel(options, weight_file, stateful=False, start="zeros")(ids)
    for key in plain:
        np.testing.assert_array_equal(with_extra_keys[key], plain[key])


def test_more_negatives_than_words_trains_with_the_full_softmax_and_says_so():
    options = tiny_options()
    options.update(n_negative_samples_batch=100)
    with pytest.warns(UserWarning, match=r"'n_negative_samples_batch' \(100\) exceeds the vocabulary.*full softmax"):
        _, settings = training_settings(options)
    assert settings.sample_softmax is False
