"""Test configuration: quiet TensorFlow logs, the `slow` marker, the training corpus."""
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: a convergence test that trains for many steps (runs by default; -m 'not slow' skips it)")


@pytest.fixture(scope="module")
def training_corpus(tmp_path_factory):
    """`training_helpers.write_corpus`'s train shards, held-out file and vocabulary, once per module."""
    # Imported here, not at the top: training_helpers imports TensorFlow.
    from training_helpers import write_corpus

    return write_corpus(tmp_path_factory.mktemp("corpus"))
