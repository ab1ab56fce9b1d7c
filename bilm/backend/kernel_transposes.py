"""Kernels' transposes kept beside them, for inference products taken in columns (JAX's highway,
`bilm/backend/jax/column_kernels.py`): each made once per value of its kernel and dropped with the kernel."""
import weakref


class KernelTransposes:
    """The transposes of variables' current values, made by `transpose(value)` on first use and again once the
    value changes (another value object: JAX's arrays change by replacement)."""

    def __init__(self, transpose):
        self._transpose = transpose
        # {id(variable): (its value, the transpose)}; an entry goes with its variable.
        self.kept = {}

    def of(self, kernel):
        """The transpose of `kernel`'s (a Keras variable's) current value."""
        value = kernel.value
        kept = self.kept.get(id(kernel))
        if kept is None or kept[0] is not value:
            if kept is None:
                weakref.finalize(kernel, self.kept.pop, id(kernel), None)
            kept = self.kept[id(kernel)] = (value, self._transpose(value))
        return kept[1]
