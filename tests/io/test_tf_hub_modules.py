"""TF1 Hub modules of ELMo open with bilm.load and equal the bilm-tf model whose variables they hold."""
import io
import os
import tarfile

import numpy as np
import pytest
import tensorflow as tf

import bilm
from bilm.io.sources.model_files import ModelFileError, locate_model
from bilm.io.sources.tf_hub_modules import TFHubModuleError
from helpers import SENTENCES, write_model
from hub_modules import DEEPPAVLOV_MIX, MIX_GAMMA, MIX_W, TF_HUB_MIX, write_module


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A small bilm-tf model of the published modules' fixed settings (50 characters per token)."""
    options_file, weight_file, _ = write_model(tmp_path_factory.mktemp("original"), seed=4, max_chars=50)
    return options_file, weight_file


@pytest.mark.parametrize("char_rows, lstm_names, mix", [(262, "rnn", TF_HUB_MIX), (261, "LSTMCell", DEEPPAVLOV_MIX)])
def test_a_module_equals_its_bilm_tf_model(tmp_path, original, char_rows, lstm_names, mix):
    module = write_module(str(tmp_path / "elmo_module"), original[1], char_rows, lstm_names, mix)
    want = bilm.ELMo(*original, start="zeros").embed(SENTENCES, layers="all")
    elmo = bilm.load(module, cache_dir=tmp_path / "cache", start="zeros")
    assert elmo.options == bilm.load_options(original[0]).for_prediction()
    for got, expected in zip(elmo.embed(SENTENCES, layers="all"), want):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_the_modules_mix_starts_elmo_embedding(tmp_path, original):
    elmo = bilm.load(write_module(str(tmp_path / "m"), original[1]), cache_dir=tmp_path / "cache", start="zeros")
    layer = elmo.keras_layer(output="all")
    np.testing.assert_array_equal(layer.mix.W.numpy(), MIX_W)
    np.testing.assert_array_equal(layer.mix.gamma.numpy(), [MIX_GAMMA])
    tokens = tf.ragged.constant([s for s in SENTENCES if s]).to_tensor(default_value="")
    mixed = layer(tokens)["elmo"].numpy()
    weights = np.exp(MIX_W) / np.exp(MIX_W).sum()
    for row, layers in enumerate(l for l in elmo.embed(SENTENCES, layers="all") if l.shape[1]):
        want = MIX_GAMMA * np.einsum("l,ltd->td", weights, layers)
        np.testing.assert_allclose(mixed[row, :layers.shape[1]], want, atol=1e-5)


def test_a_compressed_module_opens(tmp_path, original):
    module = write_module(str(tmp_path / "m"), original[1])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in ("saved_model.pb", "tfhub_module.pb", "variables"):
            archive.add(os.path.join(module, name), name)
    path = tmp_path / "elmo_3.tar.gz"
    path.write_bytes(buffer.getvalue())
    files = locate_model(path, cache_dir=tmp_path / "cache")
    assert files.weight_file.startswith(str(tmp_path / "cache" / "converted"))
    got = bilm.ELMo(files.options_file, files.weight_file, start="zeros").embed(SENTENCES[:1])
    np.testing.assert_allclose(got[0], bilm.ELMo(*original, start="zeros").embed(SENTENCES[:1])[0], atol=1e-6)


def test_modules_that_are_not_elmo_or_lack_variables_are_named(tmp_path, original):
    other = tmp_path / "other"
    tf.saved_model.save(tf.Module(), str(other))
    with pytest.raises(ModelFileError, match=r"holds a TF-Hub module or SavedModel other than a TF1 Hub module of "
                                             r"ELMo"):
        locate_model(other, cache_dir=tmp_path / "cache")
    broken = write_module(str(tmp_path / "broken"), original[1],
                          drop=("bilm/CNN_high_0/b_carry", "bilm/RNN_1/RNN/MultiRNNCell/Cell1/rnn/lstm_cell/bias"))
    with pytest.raises(TFHubModuleError, match=r"broken: the module lacks CNN_high_0/b_carry, "
                                               r"RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B \(the weight file's names"):
        locate_model(broken, cache_dir=tmp_path / "cache")
