"""ELMoModelHandler: RunInference's batches give what ELMo.embed gives; bad settings are clear errors."""
import apache_beam as beam
import numpy as np
import pytest
from apache_beam.ml.inference.base import RunInference
from apache_beam.testing.util import assert_that

from bilm.beam import ELMoModelHandler
from bilm.beam.model_handler import n_tokens
from bilm.pretrained import ELMo
from helpers import SENTENCES

WARM_UP = [" ".join(sentence) for sentence in SENTENCES if sentence] * 3


@pytest.mark.slow
def test_run_inference_gives_embeds_vectors(model):
    options_file, weight_file, _ = model
    loader = ELMoModelHandler(options_file=options_file, weight_file=weight_file, warm_up=WARM_UP)
    elmo = loader.load_model()
    assert elmo.start == "warm"
    reference = ELMo(options_file, weight_file, warm_up=WARM_UP)
    batch = [" ".join(SENTENCES[0]), SENTENCES[3], "", SENTENCES[4]]  # strings, token lists, an empty sentence
    for layers in ["average", "all", "top", 1]:
        handler = ELMoModelHandler(options_file=options_file, weight_file=weight_file, layers=layers)
        results = handler.run_inference(batch, elmo)
        assert [result.example for result in results] == batch
        for result, array in zip(results, reference.embed(batch, layers=layers)):
            assert result.inference.dtype == np.float32 and result.inference.shape == array.shape
            np.testing.assert_allclose(result.inference, array, atol=1e-6)


def test_run_inference_in_a_pipeline_batches_by_tokens(model):
    options_file, weight_file, _ = model
    handler = ELMoModelHandler(options_file=options_file, weight_file=weight_file, layers="top", start="zeros",
                               max_batch_tokens=5)
    assert handler.batch_elements_kwargs() == {"min_batch_size": 5, "max_batch_size": 5, "element_size_fn": n_tokens}
    assert [n_tokens(s) for s in ["a b c", ["a", "b"], "", []]] == [3, 2, 1, 1]
    sentences = [" ".join(sentence) for sentence in SENTENCES]
    expected = dict(zip(sentences, ELMo(options_file, weight_file, start="zeros").embed(sentences, layers="top")))

    def check(results):
        assert sorted(result.example for result in results) == sorted(sentences)
        for result in results:
            np.testing.assert_allclose(result.inference, expected[result.example], rtol=1e-5, atol=1e-6)

    with beam.Pipeline(runner="FnApiRunner") as pipeline:
        assert_that(pipeline | beam.Create(sentences) | RunInference(handler), check)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "either as model= .* or as options_file= and weight_file="),
    ({"model": "m", "options_file": "o", "weight_file": "w"}, "either as model="),
    ({"model": "m", "layers": "mean"}, "layers must be"),
    ({"model": "m", "start": "cold"}, "start must be"),
    ({"model": "m", "kernel_dtype": "float16"}, "kernel_dtype"),
    ({"model": "m", "max_batch_tokens": 0}, "max_batch_tokens must be a positive integer"),
    ({"model": "m", "tf32": "off"}, "tf32 must be None, True or False"),
])
def test_bad_settings_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ELMoModelHandler(**kwargs)


def test_handlers_of_the_same_model_share_a_tag():
    assert ELMoModelHandler("m").model_tag() == ELMoModelHandler("m", layers="all").model_tag()
    assert ELMoModelHandler("m").model_tag() != ELMoModelHandler("m", start="zeros").model_tag()
    assert ELMoModelHandler("m").model_tag() == ELMoModelHandler("m", tf32=None).model_tag()
    assert ELMoModelHandler("m").model_tag() != ELMoModelHandler("m", tf32=False).model_tag()


@pytest.mark.parametrize("tf32", [False, True])
def test_a_handler_asked_for_tf32_sets_it_in_the_worker_that_loads_the_model(model, tf32):
    import tensorflow as tf

    options_file, weight_file, _ = model
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(not tf32)
        ELMoModelHandler(options_file=options_file, weight_file=weight_file, tf32=tf32).load_model()
        assert tf.config.experimental.tensor_float_32_execution_enabled() is tf32
        ELMoModelHandler(options_file=options_file, weight_file=weight_file).load_model()
        assert tf.config.experimental.tensor_float_32_execution_enabled() is tf32  # None leaves it
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)
