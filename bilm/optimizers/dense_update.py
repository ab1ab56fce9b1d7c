"""A dense optimizer update: one compiled pass for large variables, plain ops for small ones."""
import tensorflow as tf

# Variables of at least this many elements get the compiled pass.
COMPILED_MIN_ELEMENTS = 1 << 18


def dense_update(function):
    """`function` (tensors in, tensors out: its first operand the size of
    the variable, e.g. a slot) as a dense update.

    Where that operand has at least `COMPILED_MIN_ELEMENTS` elements the
    update runs compiled with XLA, one pass over memory instead of one per
    op, each with a temporary the size of the variable. Smaller variables
    fit in cache, where those passes cost little, and run as plain ops: XLA
    compiles once per shape, and a model has a dozen small shapes (biases,
    char CNN kernels), whose compilations made most of a short run's first
    step. The compiled function is the update's `compiled` attribute.
    """
    compiled = tf.function(function, jit_compile=True, autograph=False)

    def update(*tensors):
        size = tensors[0].shape.num_elements()
        if size is None or size >= COMPILED_MIN_ELEMENTS:
            return compiled(*tensors)
        return function(*tensors)

    update.__doc__ = function.__doc__
    update.compiled = compiled
    return update
