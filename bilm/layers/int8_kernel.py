"""Layer kernels kept in float32, bfloat16 or int8 (with per-column scales), for the layers' `kernel_dtype`."""
import keras
import numpy as np
import tensorflow as tf

from bilm.ops.scaled_kernel import ScaledKernel, quantize_columns


class Int8Kernel(tf.Module):
    """A layer's int8 kernel: two non-trainable weights of the layer,
    `{name}` int8 `(n, m)` and `{name}_scale` float32 `(m,)`
    (`bilm.ops.scaled_kernel`). A `tf.Module`, so that a SavedModel of the
    layer tracks both.

    It reads and writes like the float32 variable it replaces, so the
    weight files' table needs no case of its own: `assign` quantizes a
    float array column by column, `numpy` gives the float32 kernel it now
    stands for (`values * scale`), `shape` is the kernel's.
    """

    def __init__(self, layer, name, shape, initializer):
        super().__init__(name=name)
        self.values = layer.add_weight(name=name, shape=shape, dtype="int8", initializer="zeros", trainable=False)
        self.scale = layer.add_weight(name=f"{name}_scale", shape=(shape[1],), initializer="ones", trainable=False)
        initializer = keras.initializers.get(initializer)
        if not isinstance(initializer, keras.initializers.Zeros):  # zeros are what the weights hold already
            self.assign(initializer(shape))

    @property
    def shape(self):
        return self.values.shape

    def assign(self, kernel):
        values, scale = quantize_columns(np.asarray(kernel, np.float32))
        self.values.assign(values)
        self.scale.assign(scale)

    def numpy(self):
        return self.values.numpy().astype(np.float32) * self.scale.numpy()

    def operand(self):
        """The `ScaledKernel` of this kernel's current values, for the ops' products."""
        return ScaledKernel(tf.convert_to_tensor(self.values), tf.convert_to_tensor(self.scale))
