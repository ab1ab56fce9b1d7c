"""The loaded op library of `lowbit_matmul.cc` (once per process), whether it takes float32 kernels, its gradient.

`bilm.ops.lowbit_matmul` builds its products on it, and
`bilm.ops.batch_invariant` takes float32 products to it where it streams
them: both import this module, which imports neither.
"""
import threading

import tensorflow as tf

from bilm.ops.native.build import BuildError, build_library, source_path, warn_not_built
from bilm.ops.placement import native_kernels_allowed

_LOADED = {}
_LOADING = threading.Lock()
_OP_NAME = "BilmLowbitMatmul"


def load_lowbit_ops():
    """The module of bilm's low-bit matmul op (`bilm_lowbit_matmul`), built and loaded once per process.

    The first call in a process finds the library in the cache or builds
    it (tens of seconds); later calls return the same module.

    Returns:
        the module `tf.load_op_library` gives, or None when the library
        cannot be built or loaded (no compiler, a failed build): a
        RuntimeWarning says once what failed, and `lowbit_matmul` uses
        stock TensorFlow ops instead.
    """
    with _LOADING:
        return _load_ops_locked()


def _load_ops_locked():
    if "ops" not in _LOADED:
        _LOADED["ops"] = load_op_library_or_warn(source_path("lowbit_matmul.cc"))
    return _LOADED["ops"]


def load_op_library_or_warn(source, cache_dir=None, compiler=None):
    """`tf.load_op_library` of `build_library(source, cache_dir, compiler)`, or None after one warning."""
    try:
        return tf.load_op_library(build_library(source, cache_dir, compiler))
    except (BuildError, OSError, tf.errors.OpError) as error:
        warn_not_built("native matmul kernel", "the slower stock TensorFlow ops are used instead", error,
                       stacklevel=3)
        return None


def streams_float32():
    """Whether bilm's kernel takes float32 kernels here: the library is
    built, with AVX2 and FMA (elsewhere it registers no float32 kernel),
    and `bilm.ops.placement.native_kernels_allowed()`."""
    return native_kernels_allowed() and _probed("float32", _has_float32_kernel)


def _probed(key, probe):
    """`probe(the loaded library, or None)`, once a process (kept as `key`)."""
    with _LOADING:
        if key not in _LOADED:
            _LOADED[key] = probe(_load_ops_locked())
        return _LOADED[key]


def _has_float32_kernel(ops):
    if ops is None:
        return False
    try:
        with tf.init_scope():  # eagerly, even while a function is traced
            ops.bilm_lowbit_matmul(tf.zeros([1, 1]), tf.zeros([1, 1]), tf.zeros([0]))
    except tf.errors.NotFoundError:
        return False
    return True


def bfloat16_dot_products():
    """Whether bilm's kernel takes a bfloat16 kernel's columns, in whole tiles of 32, as bfloat16 dot products
    here (its build has AVX512-BF16): `x` is then rounded to bfloat16 there, as TensorFlow's bfloat16 matmul
    rounds it, each product exact and the sums float32; elsewhere, and in the columns past the last tile, `x` is
    multiplied as it is. False where the library is not built. Probed once a process, on a value that bfloat16
    rounds (`1 + 2**-12`)."""
    return _probed("bfloat16_dot_products", _rounds_x)


def _rounds_x(ops):
    if ops is None:
        return False
    with tf.init_scope():
        kernel = tf.fill([2, 32], tf.constant(0.25, tf.bfloat16))
        product = ops.bilm_lowbit_matmul(tf.fill([1, 2], 1 + 2.0 ** -12), kernel, tf.zeros([0]))
    return bool(product.numpy()[0, 0] == 0.5)


def float32_kernel_matmul(x, kernel):
    """`x @ kernel` by bilm's kernel, for a float32 `(n, m)` kernel where `streams_float32()`: float32
    `(rows, n)` -> float32 `(rows, m)`, each row summed alike at any number of rows."""
    return load_lowbit_ops().bilm_lowbit_matmul(tf.convert_to_tensor(x, tf.float32), kernel, tf.zeros([0]))


# Registered where the op is loaded, so that every product on it has its gradient, whichever module built it.
@tf.RegisterGradient(_OP_NAME)
def _gradient(op, grad):
    """The gradient reaches `x` (`(grad * scale) @ kernel^T`, in float32),
    e.g. a trainable layer below frozen 16-bit ones, and a float32 kernel
    (`x^T @ grad`: fine-tuning through ELMo); not a bfloat16 or int8 kernel
    or its scales, which are for inference (train with float32 kernels)."""
    x, kernel, scale = op.inputs
    if scale.shape.rank == 1 and scale.shape[0] is not None:  # known when traced: no branch to trace
        scaled = grad * scale if scale.shape[0] > 0 else grad
    else:
        scaled = tf.cond(tf.size(scale) > 0, lambda: grad * scale, lambda: grad)
    d_x = tf.matmul(scaled, tf.cast(kernel, tf.float32), transpose_b=True)
    d_kernel = tf.matmul(x, grad, transpose_a=True) if kernel.dtype == tf.float32 else None
    return d_x, d_kernel, None
