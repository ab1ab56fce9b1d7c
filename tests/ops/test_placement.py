"""bilm's own CPU ops run only where the work is placed on a CPU and not compiled with XLA (bilm.ops.placement).

A CPU machine cannot run a GPU, but it can trace for one: a function traced
under `tf.device("/GPU:0")`, or while TensorFlow lists a GPU, is the graph
that a GPU machine would run, and it must hold none of bilm's CPU-only ops.
"""
import numpy as np
import pytest
import tensorflow as tf

from bilm import Batcher, ELMoEmbedding
from bilm.models import write_random_model
from bilm.ops import placement
from bilm.ops.lowbit_matmul import load_lowbit_ops
from bilm.presets import get_preset
from helpers import graph_op_types

BILM_OPS = {"BilmLowbitMatmul", "BilmLstmRecurrence"}


@pytest.fixture
def gpu_listed(monkeypatch):
    """TensorFlow lists a logical GPU (as on a GPU machine); ops still run on this CPU."""
    listed = [*tf.config.list_logical_devices(), tf.config.LogicalDevice("/device:GPU:0", "GPU")]
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda device_type=None: [
        d for d in listed if device_type is None or d.device_type == device_type])


def _traced(probe, device=None, jit_compile=None):
    """What `probe()` returns while a function is traced (under `tf.device(device)`, compiled or not)."""
    seen = []

    def body(x):
        if device is None:
            seen.append(probe())
        else:
            with tf.device(device):
                seen.append(probe())
        return x

    tf.function(body, jit_compile=jit_compile, autograph=False).get_concrete_function(tf.TensorSpec([]))
    return seen[0]


def test_a_cpu_allows_bilms_ops_eagerly_and_traced():
    assert placement.device_type() == "CPU"
    assert placement.native_kernels_allowed()
    assert _traced(placement.native_kernels_allowed)
    assert _traced(placement.native_kernels_allowed, "/CPU:0")


def test_a_gpu_scope_refuses_them_in_the_function_and_in_functions_it_traces():
    assert _traced(placement.device_type, "/GPU:0") == "GPU"
    assert not _traced(placement.native_kernels_allowed, "/job:localhost/replica:0/task:0/device:GPU:0")
    inner = tf.function(lambda x: tf.constant(placement.native_kernels_allowed()), autograph=False)
    assert not _traced(lambda: tf.get_static_value(inner(1.0)), "/GPU:0")
    with tf.device("/GPU:0"):
        assert not placement.native_kernels_allowed()  # eagerly too


def test_a_listed_gpu_refuses_them_unless_the_work_is_placed_on_the_cpu(gpu_listed):
    assert placement.device_type() == "GPU"
    assert not placement.native_kernels_allowed()
    assert not _traced(placement.native_kernels_allowed)
    assert _traced(placement.native_kernels_allowed, "/CPU:0")


def test_xla_and_stock_kernels_refuse_them():
    assert _traced(placement.compiling_with_xla, jit_compile=True)
    assert not _traced(placement.compiling_with_xla, jit_compile=False)
    assert not _traced(placement.native_kernels_allowed, jit_compile=True)
    with placement.stock_kernels():
        assert not placement.native_kernels_allowed()
        assert not _traced(placement.native_kernels_allowed)


@pytest.mark.parametrize("bfloat16_arithmetic", [True, False])
def test_bfloat16_products_are_chosen_by_the_device_that_runs_them(monkeypatch, bfloat16_arithmetic):
    monkeypatch.setattr(placement, "has_bfloat16_arithmetic", lambda: bfloat16_arithmetic)
    assert placement.bfloat16_products_fast() is bfloat16_arithmetic
    assert _traced(placement.bfloat16_products_fast, "/CPU:0") is bfloat16_arithmetic
    assert _traced(placement.bfloat16_products_fast, "/GPU:0") is True


@pytest.fixture(scope="module")
def bfloat16_layer(tmp_path_factory):
    """A tiny ELMoEmbedding with bfloat16 kernels: one sentence runs bilm's ops on a CPU where they build."""
    files = write_random_model(str(tmp_path_factory.mktemp("tiny")), get_preset("tiny"), seed=0)
    return ELMoEmbedding.from_files(*files, output="all", start="zeros", kernel_dtype="bfloat16")


def _sentence_graph_ops(layer, device=None):
    def run(ids):
        return layer(ids)["elmo"]

    if device is not None:
        inner = run

        def run(ids):
            with tf.device(device):
                return inner(ids)

    function = tf.function(run, autograph=False)
    return graph_op_types(function.get_concrete_function(tf.TensorSpec([1, None, 50], tf.int32)).graph)


@pytest.mark.slow
def test_one_sentence_holds_bilms_ops_on_a_cpu_and_none_where_a_gpu_runs_it(bfloat16_layer, monkeypatch):
    # Where bilm's kernel cannot be built (no C++ compiler) no graph holds its ops.
    built = load_lowbit_ops() is not None
    assert bool(BILM_OPS & _sentence_graph_ops(bfloat16_layer)) is built
    assert not BILM_OPS & _sentence_graph_ops(bfloat16_layer, "/GPU:0")
    listed = [*tf.config.list_logical_devices(), tf.config.LogicalDevice("/device:GPU:0", "GPU")]
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda device_type=None: [
        d for d in listed if device_type is None or d.device_type == device_type])
    assert not BILM_OPS & _sentence_graph_ops(bfloat16_layer)
    assert bool(BILM_OPS & _sentence_graph_ops(bfloat16_layer, "/CPU:0")) is built


@pytest.mark.slow
def test_the_gpu_graph_gives_the_cpu_graphs_vectors(bfloat16_layer):
    # Soft placement runs the "GPU" graph here, on the CPU: stock ops instead of bilm's, the same vectors.
    ids = Batcher(None, 50).batch_sentences([["The", "cat", "sat", "on", "the", "mat"]])
    on_cpu = tf.function(lambda ids: bfloat16_layer(ids)["elmo"])(ids)

    @tf.function
    def on_gpu(ids):
        with tf.device("/GPU:0"):
            return bfloat16_layer(ids)["elmo"]

    np.testing.assert_allclose(on_gpu(ids).numpy(), on_cpu.numpy(), rtol=2e-2, atol=2e-3)
