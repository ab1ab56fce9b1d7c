"""Test configuration: quiet TensorFlow logs and this checkout's bilm in the processes the tests start, one JAX
compilation cache for the session's processes, shared fixtures (a tiny model, the training corpus, a local
server)."""
import gc
import os
import shutil
import sys
import tempfile

import pytest

from local_server import Server

# The processes the tests start import this checkout's bilm, with TensorFlow's logs quiet. Most tests' processes
# then share one environment, and so one warm server (tests/warm_python.py) a worker.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != ROOT:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))

# JAX's and TensorFlow's persistent compilation caches, for the session's processes: many compile the same
# tiny programs with XLA (on JAX a training step, an evaluation; on TensorFlow the training step's compiled
# parts, the char CNN's and the sampled softmax's), and a process after the first reads them from the cache.
# Set by the session's first process before pytest-xdist starts its workers, which inherit them; removed at
# the end. (TensorFlow logs an error line as it reads an entry, hidden at TF_CPP_MIN_LOG_LEVEL=3: it tries
# the text format first.)
JAX_CACHE = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
TF_XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory="


def _share_the_cores(config):
    """With several pytest-xdist workers, each worker's processes get their share of the cores for PyTorch's
    OpenMP threads and TensorFlow's thread pools (`OMP_NUM_THREADS`, `TF_NUM_INTRAOP_THREADS`,
    `TF_NUM_INTEROP_THREADS`, inherited by the workers and the processes they start; unless set). PyTorch's
    threads otherwise spin against the other workers': a (368, 24) x (24, 64) matmul took 9-16 ms with 2 threads
    on 2 busy cores, 18 us with 1. TensorFlow's suffer less: four training modules took 138 s with two workers,
    128 s with one thread each."""
    workers = getattr(config.option, "numprocesses", None)
    cores = os.cpu_count() or 1
    if isinstance(workers, str):
        workers = cores if workers in ("auto", "logical") else int(workers)
    if workers and workers > 1:
        for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            os.environ.setdefault(name, str(max(1, cores // workers)))


def pytest_configure(config):
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        gc.disable()  # in a process that collects, until the test modules are imported (pytest_collection_finish)
    if not hasattr(config, "workerinput"):
        _temporary_folder_of_the_run(config)
    if hasattr(config, "workerinput") or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    _share_the_cores(config)
    config.bilm_compilation_cache = tempfile.mkdtemp(prefix="bilm-tests-compilation-cache-")
    os.environ.update(JAX_CACHE, JAX_COMPILATION_CACHE_DIR=os.path.join(config.bilm_compilation_cache, "jax"))
    config.bilm_tf_xla_flags = os.environ.get("TF_XLA_FLAGS")
    tensorflow_cache = TF_XLA_CACHE_FLAG + os.path.join(config.bilm_compilation_cache, "tensorflow")
    os.environ["TF_XLA_FLAGS"] = " ".join(filter(None, [config.bilm_tf_xla_flags, tensorflow_cache]))


def pytest_collection_finish(session):
    """Once the test modules are imported (TensorFlow, Keras, JAX, Beam: objects that live as long as the
    process), they are frozen out of the cyclic collector, which was paused while they were imported: a full
    collection walks only what the tests made since, and comes after five times as many younger ones. The
    tests' own garbage is still collected."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 50)
    gc.enable()


def _temporary_folder_of_the_run(config):
    """The processes this run starts (pytest-xdist's workers, the tests' commands and their children) make their
    temporary files in a folder of the run's (`TMPDIR`), removed when it ends: a worker ends without running
    `atexit`, which is where TensorFlow's autograph removes the modules it writes, and a command a test kills
    leaves its own. This process keeps the system's folder (`tempfile` keeps the first one it finds, and pytest
    puts its `tmp_path` folders there)."""
    tempfile.gettempdir()
    config.bilm_tmpdir = (os.environ.get("TMPDIR"), tempfile.mkdtemp(prefix="bilm-tests-tmp-"))
    os.environ["TMPDIR"] = config.bilm_tmpdir[1]


def pytest_unconfigure(config):
    if "warm_python" in sys.modules:  # a pytest-xdist worker ends without running `atexit`
        sys.modules["warm_python"].close_servers()
    if hasattr(config, "bilm_tmpdir"):  # after the workers ended
        previous, directory = config.bilm_tmpdir
        shutil.rmtree(directory, ignore_errors=True)
        if previous is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous
    directory = getattr(config, "bilm_compilation_cache", None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
        for name in [*JAX_CACHE, "JAX_COMPILATION_CACHE_DIR"]:
            os.environ.pop(name, None)
        if config.bilm_tf_xla_flags is None:
            os.environ.pop("TF_XLA_FLAGS", None)
        else:
            os.environ["TF_XLA_FLAGS"] = config.bilm_tf_xla_flags


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
