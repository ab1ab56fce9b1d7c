"""ELMoForManyLangs' `Embedder` on bilm: its documented usage, with only the import changed, gives what
ELMoForManyLangs computes, against the NumPy reference of its biLM (`efml_reference`)."""
import os

import numpy as np
import pytest

import efml_models as M
import efml_reference
from bilm.compat.elmoformanylangs import Embedder
from bilm.errors import UserError


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A model folder in ELMoForManyLangs' layout, and the model as the reference reads it."""
    folder = tmp_path_factory.mktemp("efml") / "xx.model"
    model = M.write_model(folder, "zip", seed=4)
    words = os.path.join(folder, "word.dic")
    model = {**model, "char2id": efml_reference.read_dictionary(os.path.join(folder, "char.dic")),
             "word2id": efml_reference.read_dictionary(words) if os.path.exists(words) else None}
    return folder, model


def test_the_documented_usage_gives_elmoformanylangs_layers(model_folder, tmp_path, monkeypatch):
    folder, model = model_folder
    monkeypatch.setenv("BILM_CACHE", str(tmp_path / "cache"))
    embedder = Embedder(str(folder), batch_size=2)
    expected = M.reference_layers(model)
    means = embedder.sents2elmo(M.SENTENCES)
    assert len(means) == len(M.SENTENCES)
    for sentence, got, reference in zip(M.SENTENCES, means, expected):
        assert got.shape == (len(sentence), 12) and got.dtype == np.float32
        np.testing.assert_allclose(got, reference.mean(axis=0), atol=1e-5)
    for output_layer in (-2, 0, 1, 2):
        for got, reference in zip(embedder.sents2elmo(M.SENTENCES, output_layer=output_layer), expected):
            np.testing.assert_allclose(got, reference if output_layer == -2 else reference[output_layer], atol=1e-5)
    assert max(np.abs(r).max() for r in expected if r.size) > 0.1
    with pytest.raises(UserError, match=r"output_layer must be -1 .*, -2 .* or a layer 0-2. Received: output_layer=3"):
        embedder.sents2elmo(M.SENTENCES, output_layer=3)
