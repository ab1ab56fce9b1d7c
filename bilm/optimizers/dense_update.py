"""A dense optimizer update: one compiled pass for large variables, plain ops for small ones."""
import functools

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
    step. The compiled function is the update's `compiled` attribute, made
    at its first use (so that the module imports without TensorFlow).
    """
    return _DenseUpdate(function)


class _DenseUpdate:
    def __init__(self, function):
        functools.update_wrapper(self, function)
        self.function = function
        self._compiled = None

    @property
    def compiled(self):
        if self._compiled is None:
            import tensorflow as tf

            self._compiled = tf.function(self.function, jit_compile=True, autograph=False)
        return self._compiled

    def __call__(self, *tensors):
        size = tensors[0].shape.num_elements()
        if size is None or size >= COMPILED_MIN_ELEMENTS:
            return self.compiled(*tensors)
        return self.function(*tensors)
