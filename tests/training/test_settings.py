"""training_settings: bad training options are errors that name the key and the rule."""
import pytest

from bilm.options import OptionsError
from bilm.training.settings import training_settings
from training_helpers import tiny_options


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
