"""One settings value for every front end: the same arguments give the same `EmbeddingSettings`, and a bad one
is the same one-line error, whichever front end was given it."""
import pytest

from bilm.beam.model_handler import ELMoModelHandler
from bilm.errors import UserError
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.embedding_settings import EmbeddingSettings
from bilm.pretrained import ELMo
from helpers import write_model


def test_the_front_ends_hold_the_settings_they_were_given(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    warm_up = [["The", "cat", "sat"], ["A", "dog"]]
    expected = EmbeddingSettings.of(start="warm", warm_up=warm_up, kernel_dtype="bfloat16", token_cache_size=7)
    elmo = ELMo(options_file, weight_file, start="warm", warm_up=warm_up, kernel_dtype="bfloat16",
                token_cache_size=7)
    assert elmo.settings == expected and elmo.language_model.settings is elmo.settings
    assert elmo.start == "warm" and elmo.kernel_dtype == "bfloat16" and elmo.boundary_state is not None
    handler = ELMoModelHandler(options_file=options_file, weight_file=weight_file, start="warm", warm_up=warm_up,
                               kernel_dtype="bfloat16")
    assert handler.settings == EmbeddingSettings.of(start="warm", warm_up=warm_up, kernel_dtype="bfloat16")
    stateful = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=3, kernel_dtype="int8")
    assert stateful.settings == EmbeddingSettings.of(max_batch_size=3, kernel_dtype="int8")
    assert stateful.max_batch_size == 3 and stateful.variables[0].shape[0] == 3


@pytest.mark.parametrize("bad, message", [
    ({"start": "cold"}, "start must be one of"),
    ({"kernel_dtype": "float16"}, "kernel_dtype must be one of"),
    ({"token_cache_size": -1}, "token_cache_size must be an integer >= 0"),
])
def test_a_bad_setting_is_the_same_error_from_every_front_end(tmp_path, bad, message):
    options_file, weight_file, _ = write_model(tmp_path)
    makers = [lambda: EmbeddingSettings.of(**bad), lambda: ELMo(options_file, weight_file, **bad)]
    if "token_cache_size" not in bad:
        makers.append(lambda: ELMoModelHandler(options_file=options_file, weight_file=weight_file, **bad))
    errors = []
    for make in makers:
        with pytest.raises(UserError, match=message) as caught:
            make()
        errors.append(str(caught.value))
    assert len(set(errors)) == 1, errors


def test_the_keras_layer_checks_its_start_and_kernel_dtype_as_the_settings_do(tmp_path):
    options_file, _, _ = write_model(tmp_path)
    with pytest.raises(UserError) as from_settings, pytest.warns(DeprecationWarning):
        EmbeddingSettings.of(kernel_dtype=None, matmul_dtype="float16")
    with pytest.raises(UserError) as from_layer:
        ELMoEmbedding(options_file, kernel_dtype="float16")
    assert str(from_layer.value) == str(from_settings.value) and "kernel_dtype must be one of" in str(from_layer.value)
    # The layer's start is its graph's own: "warm" or "zeros", never None (the settings' None picks one).
    for start in (None, "cold"):
        with pytest.raises(UserError, match=r"^start must be one of \('warm', 'zeros'\)\. Received: start="):
            ELMoEmbedding(options_file, start=start)
    assert EmbeddingSettings.of(start=None).start is None
