"""A global mixed-precision policy and ELMoEmbedding: the biLM stays float32, the model around it follows the policy."""
import keras
import numpy as np
import pytest

from bilm import Batcher, ELMoEmbedding
from bilm.errors import UserError
from bilm.models import write_random_model
from bilm.presets import get_preset

SENTENCES = [["The", "cat", "sat"], ["Hi"]]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_random_model(str(tmp_path_factory.mktemp("tiny")), get_preset("tiny"), seed=0)


@pytest.fixture
def global_policy():
    """Sets a global policy for one test, then puts float32 back."""
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_bfloat16", pytest.param("mixed_float16", marks=pytest.mark.slow)])
def test_a_mixed_policy_keeps_elmo_float32_and_the_model_trains(tiny_model, global_policy, policy, tmp_path):
    ids = Batcher(None, 50).batch_sentences(SENTENCES)
    reference = ELMoEmbedding.from_files(*tiny_model, start="zeros")(ids).numpy()
    global_policy(policy)
    layer = ELMoEmbedding.from_files(*tiny_model, start="zeros")
    vectors = layer(ids)
    assert vectors.dtype == "float32"
    np.testing.assert_array_equal(np.asarray(vectors), reference)
    tokens = keras.Input((None, 50), dtype="int32")
    dense = keras.layers.Dense(3)
    model = keras.Model(tokens, dense(layer(tokens)))
    assert dense.compute_dtype == policy.split("_")[1]
    model.compile(keras.optimizers.SGD(0.1), "mse")
    before = model.evaluate(ids, np.ones((2, 3, 3)), verbose=0)
    model.fit(ids, np.ones((2, 3, 3)), epochs=3, verbose=0)
    assert model.evaluate(ids, np.ones((2, 3, 3)), verbose=0) < before
    path = str(tmp_path / "model.keras")
    model.save(path)
    np.testing.assert_allclose(np.asarray(keras.models.load_model(path).predict(ids, verbose=0), np.float32),
                               np.asarray(model.predict(ids, verbose=0), np.float32), rtol=1e-6)


def test_elmo_refuses_a_dtype_other_than_float32(tiny_model):
    with pytest.raises(UserError, match="computes in float32.*kernel_dtype='bfloat16'"):
        ELMoEmbedding.from_files(*tiny_model, start="zeros", dtype="mixed_bfloat16")
    assert ELMoEmbedding.from_files(*tiny_model, start="zeros", dtype="float32").compute_dtype == "float32"
