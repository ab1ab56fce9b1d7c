"""bilm's low-bit matmul kernel against float64 NumPy, in graphs and loops, and the cache that builds it.

The kernel is built (or found) in the user's cache once per session; these
tests fail, not skip, without a C++ compiler. The cache's own tests build
a one-line source with a compiler wrapper that counts its builds.
"""
import ctypes
import os
import stat
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

from bilm.ops.lowbit_matmul import (
    UNLIMITED_ROWS,
    bfloat16_dot_products,
    inference_kernel_matmul,
    inference_products,
    load_lowbit_ops,
    load_op_library_or_warn,
    lowbit_matmul,
    stock_kernels,
    streamed_kernel_matmul,
    streamed_rows_limit,
    streams_float32,
)
from bilm.ops.native import BuildError, build_library, lowbit_ops, source_path
from bilm.ops.native import build as build_module
from bilm.ops.scaled_kernel import ScaledKernel, quantize_columns
from bilm.utils.cpu_features import cpu_flags
from helpers import ROOT, graph_op_types

# 33 and 130: from `kMinPackedRows` on, a float32 kernel runs from its tiled copy.
ROWS = [0, 1, 3, 8, 33, 130]
# (n, m): odd sizes on both sides, a width that splits into chunks that are not multiples of 8, and a narrow
# kernel whose rows split into blocks (the last of odd depth) beside a whole tile of 32 columns.
SIZES = [(7, 1000), (1001, 7), (64, 4100), (1001, 40)]


@pytest.fixture(scope="module")
def ops():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_lowbit_ops()
    assert loaded is not None, [str(w.message) for w in caught]
    return loaded


def bfloat16_kernel(rng, n, m):
    kernel = tf.cast(rng.normal(size=(n, m)).astype(np.float32), tf.bfloat16)
    return kernel, tf.cast(kernel, tf.float32).numpy().astype(np.float64), None


def int8_kernel(rng, n, m):
    kernel = rng.integers(-127, 128, size=(n, m)).astype(np.int8)
    scale = rng.uniform(1e-3, 1e-2, size=m).astype(np.float32)
    return tf.constant(kernel), kernel.astype(np.float64), scale


KERNELS = {"bfloat16": bfloat16_kernel, "int8": int8_kernel}


def assert_product(got, x, exact_kernel, scale):
    """`got` within float32 accumulation's error of the float64 `(x @ exact_kernel) * scale`."""
    x = np.asarray(x, np.float64)
    scale = np.ones(exact_kernel.shape[1]) if scale is None else np.asarray(scale, np.float64)
    exact = (x @ exact_kernel) * scale
    magnitude = (np.abs(x) @ np.abs(exact_kernel)) * scale
    assert got.dtype == np.float32 and got.shape == exact.shape
    # Summing n terms in float32 errs by at most about n units of 2**-24 of the terms' magnitude, plus the scaling.
    np.testing.assert_array_less(np.abs(got - exact), (x.shape[1] + 2) * 2.0 ** -24 * magnitude + 1e-30)


@pytest.mark.parametrize("dtype", sorted(KERNELS))
@pytest.mark.parametrize("n, m", SIZES)
@pytest.mark.parametrize("rows", ROWS)
def test_product_matches_float64_numpy(ops, dtype, rows, n, m):
    rng = np.random.default_rng(rows * 7 + n)
    kernel, exact_kernel, scale = KERNELS[dtype](rng, n, m)
    x = rng.normal(size=(rows, n)).astype(np.float32)
    got = lowbit_matmul(x, kernel, scale).numpy()
    # As bfloat16 dot products (a CPU with AVX512-BF16), the whole tiles of 32 columns take x rounded to bfloat16.
    tiled = m // 32 * 32 if dtype == "bfloat16" and bfloat16_dot_products() else 0
    assert_product(got[:, :tiled], bfloat16_rounded(x), exact_kernel[:, :tiled], None)
    assert_product(got[:, tiled:], x, exact_kernel[:, tiled:], None if scale is None else scale[tiled:])


def bfloat16_rounded(x):
    return tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy()


def test_bfloat16_products_round_x_only_where_the_cpu_multiplies_bfloat16(ops):
    # bfloat16 dot products exactly where the CPU has bfloat16 arithmetic (AVX512-BF16; -march=native builds it).
    assert bfloat16_dot_products() == ("avx512_bf16" in cpu_flags().split())
    # x = 1 + 2**-12 has no bfloat16 form (8 significant bits): rounded, the product would be 1. The 32 columns of
    # a whole tile run as dot products where the CPU has them; the 9 past it never round x.
    got = lowbit_matmul(tf.fill([1, 4], 1 + 2.0 ** -12), tf.fill([4, 41], tf.constant(0.25, tf.bfloat16))).numpy()
    np.testing.assert_array_equal(got[:, 32:], np.full((1, 9), 1 + 2.0 ** -12, np.float32))
    np.testing.assert_array_equal(got[:, :32], np.full((1, 32), 1.0 if bfloat16_dot_products() else 1 + 2.0 ** -12,
                                                       np.float32))


def test_the_products_named_for_each_kernel_dtype_are_the_ones_inference_runs(ops):
    assert ("bfloat16 dot products" in inference_products("bfloat16")) == bfloat16_dot_products()
    assert ("bilm's float32 kernel" in inference_products("float32")) == streams_float32()
    assert "int8 kernel widened" in inference_products("int8")
    with stock_kernels():
        assert all("bilm" not in inference_products(dtype) for dtype in ("float32", "bfloat16", "int8"))


def test_unaligned_operands_and_optional_scales(ops):
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(4, 13)).astype(np.float32))[1:]
    kernel = tf.constant(rng.integers(-127, 128, size=(14, 11)).astype(np.int8))[1:]
    # Slices along the first axis share their input's buffer at an odd offset.
    assert_product(lowbit_matmul(x, kernel).numpy(), x.numpy(), kernel.numpy().astype(np.float64), None)


def test_inside_a_tf_function_with_unknown_rows_and_a_variable_kernel(ops):
    rng = np.random.default_rng(2)
    kernel, exact_kernel, scale = int8_kernel(rng, 40, 24)
    variable = tf.Variable(kernel)
    product = tf.function(lambda x: lowbit_matmul(x, variable, scale),
                          input_signature=[tf.TensorSpec([None, 40], tf.float32)])
    assert product.get_concrete_function().structured_outputs.shape.as_list() == [None, 24]
    for rows in (1, 5):
        x = rng.normal(size=(rows, 40)).astype(np.float32)
        assert_product(product(x).numpy(), x, exact_kernel, scale)


def test_inside_a_while_loop(ops):
    rng = np.random.default_rng(3)
    kernel, exact_kernel, _ = bfloat16_kernel(rng, 24, 24)
    kernel_np = exact_kernel / 5

    @tf.function
    def steps(h):
        return tf.while_loop(lambda t, h: t < 5, lambda t, h: (t + 1, tf.tanh(lowbit_matmul(h, kernel) / 5)),
                             (tf.constant(0), h))[1]

    h0 = rng.normal(size=(2, 24)).astype(np.float32)
    expected = h0.astype(np.float64)
    for _ in range(5):
        expected = np.tanh(expected @ kernel_np)
    np.testing.assert_allclose(steps(h0).numpy(), expected, atol=1e-5)


def test_bad_operands_are_named(ops):
    with pytest.raises(ValueError, match="kernel.dtype=float16"):
        lowbit_matmul(tf.ones([1, 3]), tf.ones([3, 2], tf.float16))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"\[1,3\].*\[4,2\]|3 and 4"):
        lowbit_matmul(tf.ones([1, 3]), tf.ones([4, 2], tf.bfloat16))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"scale must have shape \(2,\)"):
        lowbit_matmul(tf.ones([1, 3]), tf.ones([3, 2], tf.int8), tf.ones([3]))


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_the_gradient_reaches_x_and_not_the_kernel(ops, dtype):
    # A frozen 16-bit biLM inside a trained Keras model: the tape may pass
    # through the op (e.g. a trainable layer below it), never train its kernel.
    rng = np.random.default_rng(5)
    kernel, exact_kernel, scale = KERNELS[dtype](rng, 5, 7)
    x = tf.constant(rng.normal(size=(3, 5)), tf.float32)
    upstream = tf.constant(rng.normal(size=(3, 7)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, kernel])
        y = lowbit_matmul(x, kernel, scale)
        loss = tf.reduce_sum(y * upstream)
    d_x = tape.gradient(loss, x).numpy()
    column_scale = np.ones(7) if scale is None else scale.astype(np.float64)
    np.testing.assert_allclose(d_x, (upstream.numpy() * column_scale) @ exact_kernel.T, rtol=1e-5, atol=1e-6)
    assert tape.gradient(loss, kernel) is None


def test_stock_ops_compute_the_same_product_when_the_kernel_cannot_be_built(monkeypatch):
    monkeypatch.setitem(lowbit_ops._LOADED, "ops", None)
    rng = np.random.default_rng(4)
    for dtype in sorted(KERNELS):
        kernel, exact_kernel, scale = KERNELS[dtype](rng, 9, 5)
        x = rng.normal(size=(3, 9)).astype(np.float32)
        assert_product(lowbit_matmul(x, kernel, scale).numpy(), x, exact_kernel, scale)


def cpu_has_avx2_and_fma():
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    return "avx2" in flags and "fma" in flags


def test_float32_kernels_are_taken_where_the_build_has_avx2_and_fma(ops):
    # The library is built with -march=native: its float32 kernel exists exactly where the CPU has both.
    assert streams_float32() == cpu_has_avx2_and_fma()
    # Inference takes every float32 product to it where it is built (AVX2 and FMA; AVX-512 adds tiles), else
    # none (never a mix).
    assert streamed_rows_limit(tf.zeros([2, 2])) == (UNLIMITED_ROWS if streams_float32() else 0)
    with stock_kernels():
        assert not streams_float32() and streamed_rows_limit(tf.zeros([2, 2])) == 0
        assert streamed_rows_limit(tf.zeros([2, 2], tf.bfloat16)) == 0


@pytest.mark.parametrize("n, m", SIZES)
@pytest.mark.parametrize("rows", ROWS)
def test_float32_product_matches_float64_numpy(ops, rows, n, m):
    if not cpu_has_avx2_and_fma():  # nothing registered: TensorFlow's matmul is the product
        with pytest.raises(tf.errors.NotFoundError):
            ops.bilm_lowbit_matmul(tf.zeros([rows, n]), tf.zeros([n, m]), tf.zeros([0]))
        return
    rng = np.random.default_rng(rows * 5 + m)
    kernel = rng.normal(size=(n, m)).astype(np.float32)
    x = rng.normal(size=(rows, n)).astype(np.float32)
    assert_product(streamed_kernel_matmul(x, tf.constant(kernel)).numpy(), x, kernel.astype(np.float64), None)


def test_float32_products_run_one_kernel_at_every_row_count(ops):
    rng = np.random.default_rng(6)
    kernel = tf.Variable(rng.normal(size=(24, 40)).astype(np.float32))

    product = tf.function(lambda x: inference_kernel_matmul(x, kernel))
    ops_traced = graph_op_types(product.get_concrete_function(tf.TensorSpec([None, 24])).graph)
    assert ("BilmLowbitMatmul" in ops_traced) == streams_float32()
    assert ("MatMul" in ops_traced) != streams_float32()  # never both: their sums are ordered differently
    for rows in (1, 32, 33, 300):
        x = rng.normal(size=(rows, 24)).astype(np.float32)
        assert_product(product(x).numpy(), x, kernel.numpy().astype(np.float64), None)


def test_the_gradient_reaches_a_float32_kernel(ops):
    # Fine-tuning through ELMo trains float32 kernels whose products ran bilm's kernel.
    if not streams_float32():
        pytest.fail("this test needs bilm's float32 kernel (an AVX2 and FMA CPU)")
    rng = np.random.default_rng(7)
    x = tf.constant(rng.normal(size=(3, 5)), tf.float32)
    kernel = tf.Variable(rng.normal(size=(5, 7)).astype(np.float32))
    upstream = rng.normal(size=(3, 7))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(streamed_kernel_matmul(x, kernel) * upstream)
    d_x, d_kernel = tape.gradient(loss, [x, kernel])
    np.testing.assert_allclose(d_x.numpy(), upstream @ kernel.numpy().T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d_kernel.numpy(), x.numpy().T @ upstream, rtol=1e-5, atol=1e-6)


def test_the_loaded_library_is_reused_not_rebuilt(ops):
    library = build_library(source_path("lowbit_matmul.cc"))
    before = os.stat(library).st_mtime_ns
    assert build_library(source_path("lowbit_matmul.cc")) == library
    assert os.stat(library).st_mtime_ns == before


# The cache, with a one-line library and a compiler that counts its builds.

ANSWER = 'extern "C" int bilm_answer() { return 42; }\n'


@pytest.fixture
def counting_compiler(tmp_path):
    """(source, compiler, count): a wrapper of g++ that logs each build (and takes a second over it)."""
    source = tmp_path / "answer.cc"
    source.write_text(ANSWER)
    builds = tmp_path / "builds.txt"
    compiler = tmp_path / "counting-g++"
    compiler.write_text(f'#!/bin/sh\ncase " $* " in *" -o "*) echo build >> "{builds}"; sleep 1;; esac\n'
                        'exec g++ "$@"\n')
    compiler.chmod(compiler.stat().st_mode | stat.S_IXUSR)
    return str(source), str(compiler), lambda: len(builds.read_text().splitlines()) if builds.exists() else 0


def answer(library):
    return ctypes.CDLL(library).bilm_answer()


@pytest.mark.slow
def test_a_cached_library_is_reused_and_a_damaged_one_rebuilt(tmp_path, counting_compiler):
    source, compiler, builds = counting_compiler
    cache = str(tmp_path / "cache")
    library = build_library(source, cache, compiler)
    mtime = os.stat(library).st_mtime_ns
    assert build_library(source, cache, compiler) == library and builds() == 1
    assert os.stat(library).st_mtime_ns == mtime
    # Cut short, as a full disk or a copy interrupted would leave it.
    content = open(library, "rb").read()
    with open(library, "wb") as f:
        f.write(content[:len(content) // 2])
    assert build_library(source, cache, compiler) == library and builds() == 2
    # Renamed into place but its digest never written (a crash between the two).
    os.remove(library + ".sha256")
    assert build_library(source, cache, compiler) == library and builds() == 3
    assert answer(library) == 42
    assert [name for name in os.listdir(cache) if "partial" in name] == []


# Without TensorFlow (seconds to import): build.py alone, by its path, with no TensorFlow flags.
CONCURRENT_BUILD = """
import importlib.util, os, sys, time
build_py, source, cache, compiler, mine, other = sys.argv[1:]
spec = importlib.util.spec_from_file_location("build", build_py)
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
open(mine, "w").close()
while not os.path.exists(other):
    time.sleep(0.01)
print(build.compile_cached(source, build.BUILD_FLAGS, [], cache, compiler))
"""


@pytest.mark.slow
def test_concurrent_builds_build_once_and_both_get_the_library(tmp_path, counting_compiler):
    source, compiler, builds = counting_compiler
    build_py = os.path.join(ROOT, "bilm", "ops", "native", "build.py")
    cache = str(tmp_path / "cache")
    ready = [str(tmp_path / "ready-0"), str(tmp_path / "ready-1")]
    processes = [subprocess.Popen([sys.executable, "-c", CONCURRENT_BUILD, build_py, source, cache, compiler,
                                   ready[i], ready[1 - i]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(2)]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    libraries = {out.strip() for out, _ in outputs}
    assert len(libraries) == 1 and builds() == 1
    assert answer(libraries.pop()) == 42


def test_a_failed_build_warns_once_in_one_line_and_keeps_the_log(tmp_path):
    source = tmp_path / "broken.cc"
    source.write_text("this is not C++\n")
    with pytest.raises(BuildError, match="error") as raised:
        build_library(str(source), str(tmp_path / "cache"))
    log = str(raised.value).rsplit("whole output in ", 1)[1].rstrip(")")
    assert "not C++" in open(log).read() or "does not name a type" in open(log).read()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_op_library_or_warn(str(source), str(tmp_path / "cache")) is None
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert "stock TensorFlow" in str(caught[0].message)


def test_a_failed_build_is_not_tried_again_until_its_log_is_removed(tmp_path, counting_compiler):
    _, compiler, builds = counting_compiler
    source = tmp_path / "broken.cc"
    source.write_text("this is not C++\n")
    cache = str(tmp_path / "cache")
    with pytest.raises(BuildError, match="failed .exit"):
        build_library(str(source), cache, compiler)
    with pytest.raises(BuildError, match=r"failed on .*broken.cc before.*error.*remove it to try again") as raised:
        build_library(str(source), cache, compiler)
    assert builds() == 1 and "\n" not in str(raised.value)
    (log,) = [name for name in os.listdir(cache) if name.endswith(".log")]
    os.remove(os.path.join(cache, log))
    with pytest.raises(BuildError, match="failed .exit"):
        build_library(str(source), cache, compiler)
    assert builds() == 2


def test_instruction_sets_the_headers_cannot_compile_are_turned_off(tmp_path, monkeypatch, counting_compiler):
    # A CPU with AVX512-FP16 under a compiler that enables it for -march=native: Eigen's float16 code
    # would not compile, so the build turns it off. Elsewhere the compiler is not even asked.
    source, _, _ = counting_compiler
    calls = tmp_path / "calls.txt"
    compiler = tmp_path / "fp16-g++"
    compiler.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n'
                        'case " $* " in *" -dM "*) echo "#define __AVX512FP16__ 1"; exit 0;; esac\n'
                        'exec g++ "$@"\n')
    compiler.chmod(compiler.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(build_module, "cpu_flags", lambda: "flags\t\t: fpu avx2 avx512f avx512_fp16")
    library = build_library(source, str(tmp_path / "cache"), str(compiler))
    assert answer(library) == 42
    (build_command,) = [line for line in calls.read_text().splitlines() if " -o " in line]
    assert "-march=native" in build_command.split() and "-mno-avx512fp16" in build_command.split()
    monkeypatch.setattr(build_module, "cpu_flags", lambda: "flags\t\t: fpu avx2 avx512f")
    calls.write_text("")
    assert build_module._header_breaking_features_off(str(compiler)) == []
    assert calls.read_text() == ""


def test_a_missing_compiler_is_named(tmp_path):
    source = tmp_path / "answer.cc"
    source.write_text(ANSWER)
    with pytest.raises(BuildError, match="'no-such-g\\+\\+' is not on PATH"):
        build_library(str(source), str(tmp_path / "cache"), compiler="no-such-g++")


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("n, m", [(64, 512), (300, 40), (512, 2048), (1024, 128)])
def test_a_rows_product_is_the_same_bytes_whatever_the_rows_beside_it(ops, kind, n, m):
    # An LSTM step's rows are a batch's sentences: a sentence's states must not depend on its batch.
    if kind == "float32" and not streams_float32():
        pytest.fail("this test needs bilm's float32 kernel (an AVX2 and FMA CPU)")
    rng = np.random.default_rng(n + m)
    array = (rng.normal(size=(n, m)) * 0.3).astype(np.float32)
    if kind == "int8":
        values, scale = quantize_columns(array)
        kernel = ScaledKernel(tf.constant(values), tf.constant(scale))
    else:
        kernel = tf.constant(array, kind)
    x = rng.normal(size=(70, n)).astype(np.float32)
    full = streamed_kernel_matmul(x, kernel).numpy()
    for rows in (1, 2, 7, 8, 9, 17, 64):
        assert np.array_equal(streamed_kernel_matmul(x[:rows], kernel).numpy(), full[:rows]), rows
    shuffled = rng.permutation(70)
    assert np.array_equal(streamed_kernel_matmul(x[shuffled], kernel).numpy(), full[shuffled])
