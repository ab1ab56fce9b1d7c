"""Test configuration: quiet TensorFlow logs, shared fixtures (a tiny model, the training corpus, a local server)."""
import os

import pytest

from local_server import Server

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="module")
def training_corpus(tmp_path_factory):
    """`training_helpers.write_corpus`'s train shards, held-out file and vocabulary, once per module."""
    # Imported here, not at the top: training_helpers imports TensorFlow.
    from training_helpers import write_corpus

    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny random character biLM: `(options_file, weight_file, options dict)`."""
    from helpers import write_model

    return write_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def stateless_layers(model):
    """Each of `helpers.SENTENCES`' `(3, n_tokens, 12)` layers from `model`,
    stateless from zero states, all in one batch: what every embedding path
    must give."""
    from bilm.models.bidirectional_lm import BidirectionalLanguageModel
    from bilm.text.batching import Batcher
    from helpers import SENTENCES

    options_file, weight_file, _ = model
    out = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")(
        Batcher(None, 7).batch_sentences(SENTENCES))["lm_embeddings"].numpy()
    return [out[i, :, :len(s)] for i, s in enumerate(SENTENCES)]


@pytest.fixture
def server(monkeypatch):
    """A `local_server.Server` on 127.0.0.1, reached without any proxy of the environment."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = Server()
    yield server
    server.close()
