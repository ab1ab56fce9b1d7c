"""Inference products of few rows in columns on JAX's CPU: `x @ kernel` taken as `(kernel^T @ x^T)^T` with the
kernel's transpose kept beside it, made once per kernel value.

XLA's CPU product of a few rows by a large kernel in the rows' layout reads the kernel at a fraction of the rate
it reads its transpose with the rows in columns (docs/performance.md). A layer that lists such kernels
(`column_kernels()`, as `Highway` does) gets their transposes as arguments of the compiled inference call
(`bilm.backend.jax.inference.inference_call`): made outside the program, so no call transposes a kernel again, and
only for the calls that may read them (`bilm.backend.jax.layer_calls.reads_transposes`).
"""
import math

import jax
import jax.numpy as jnp

from bilm.backend.kernel_transposes import KernelTransposes
from bilm.utils.thread_flag import ThreadValue

# Products of at most this many rows run in columns, on a CPU: the token encoder's chunk of 16 new words (batch 1
# gained a fifth end to end), not its chunks of 64, which gained nothing measurable (docs/performance.md).
COLUMN_MAX_ROWS = 32

_TRANSPOSED = ThreadValue()
TRANSPOSES = KernelTransposes(lambda value: jax.device_put(jnp.transpose(value)))


def network_column_kernels(network):
    """`(layer, variable)` for the variables of `network`'s layers (nested models' too) that list them
    (`column_kernels()`), each once, in layer order; none where JAX runs on another device than a CPU (no transposes
    kept there)."""
    if jax.default_backend() != "cpu":
        return []
    kernels = {}

    def visit(layers):
        for layer in layers:
            for kernel in getattr(layer, "column_kernels", lambda: [])():
                kernels.setdefault(kernel.path, (layer, kernel))
            visit(getattr(layer, "layers", []))

    visit(network.layers)
    return list(kernels.values())


def transposed_values(kernels):
    """`{variable path: transpose of its current value}` of `kernels`, each transposed once per value
    (`TRANSPOSES`)."""
    return {kernel.path: TRANSPOSES.of(kernel) for kernel in kernels}


def kernels_in_columns(transposed):
    """Within the block (this thread; where the inference call is traced), `column_product` reads the transposes
    `transposed` (`{variable path: array}`) gives."""
    return _TRANSPOSED.holding(transposed)


def kept_transpose(kernel):
    """The transpose of `kernel` (a variable) that `kernels_in_columns` gives, or None."""
    return (_TRANSPOSED.get() or {}).get(kernel.path)


def column_product(x, kernel):
    """`x @ kernel` (`x` `(..., n)`, `kernel` a variable) in columns where the kernel's transpose is given
    (`kernels_in_columns`: on a CPU) and `x` holds at most `COLUMN_MAX_ROWS` rows; None elsewhere (the caller's
    product then)."""
    transposed = kept_transpose(kernel)
    rows = math.prod(x.shape[:-1])
    if transposed is None or rows > COLUMN_MAX_ROWS:
        return None
    flat = jnp.reshape(x, (rows, x.shape[-1]))
    return jnp.reshape(jnp.transpose(transposed @ jnp.transpose(flat)), (*x.shape[:-1], transposed.shape[0]))
