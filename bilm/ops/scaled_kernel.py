"""int8 kernels with one float32 scale per output column, for inference.

A kernel `W` `(n, m)` is stored as `values` int8 `(n, m)` and `scale`
float32 `(m,)` with `W[:, j] ~ values[:, j] * scale[j]`: each column is
scaled so that its largest magnitude becomes 127 (symmetric, no zero
point), so a value is off by at most half a step, `scale[j] / 2`. The
products keep `x`, the accumulation and the result in float32: `(x @
values) * scale` (`bilm.ops.lowbit_matmul` reads the int8 values at
memory speed; `dequantize` gives the float32 kernel for stock products).
"""
from typing import NamedTuple

import numpy as np
import tensorflow as tf

INT8_LEVELS = 127


class ScaledKernel(NamedTuple):
    """An int8 kernel and its per-column scales (tensors or variables):
    `values` int8 `(n, m)`, `scale` float32 `(m,)`; it stands for
    `values * scale`. Passes through `tf.function`s and loops as a nested
    structure."""
    values: tf.Tensor
    scale: tf.Tensor

    @property
    def shape(self):
        return self.values.shape


def quantize_columns(kernel):
    """`(values, scale)`: int8 `(n, m)` and float32 `(m,)` for a float `(n, m)` array, per column.

    A column of zeros gets scale 1 (its values are 0)."""
    kernel = np.asarray(kernel, np.float32)
    if kernel.ndim != 2:
        raise ValueError(f"quantize_columns takes a 2-D kernel. Received: shape={kernel.shape}")
    largest = np.max(np.abs(kernel), axis=0) if kernel.shape[0] else np.zeros(kernel.shape[1], np.float32)
    scale = np.where(largest > 0, largest / INT8_LEVELS, 1.0).astype(np.float32)
    values = np.clip(np.rint(kernel / scale), -INT8_LEVELS, INT8_LEVELS).astype(np.int8)
    return values, scale


def dequantize(kernel):
    """The float32 kernel `values * scale` `(n, m)` a `ScaledKernel` stands for."""
    return tf.cast(kernel.values, tf.float32) * kernel.scale
