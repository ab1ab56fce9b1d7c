"""A layer's large kernel in its `kernel_dtype`: a Keras variable (float32, bfloat16) or, on TensorFlow, an
`Int8Kernel` (`bilm.layers.int8_kernel`). TensorFlow's fast paths take it as `bilm.backend.tensorflow.layer_calls.
kernel_operand`."""
from bilm.layers.initializers import host_values
from bilm.utils.backend import require_tensorflow


def add_kernel(layer, name, shape, initializer, kernel_dtype):
    """A kernel weight of `layer` in `kernel_dtype` (`"float32"`, `"bfloat16"`
    or `"int8"`, the last on TensorFlow only): a Keras variable, or an `Int8Kernel`."""
    if kernel_dtype == "int8":
        require_tensorflow("kernel_dtype='int8' (bilm's int8 kernels)")
        from bilm.layers.int8_kernel import Int8Kernel  # TensorFlow's
        return Int8Kernel(layer, name, shape, initializer)
    return layer.add_weight(name=name, shape=shape, initializer=host_values(initializer), dtype=kernel_dtype)

