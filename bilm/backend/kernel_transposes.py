"""Kernels' transposes kept beside them, for inference products taken in columns (JAX's and PyTorch's highway,
`bilm/backend/<name>/`): each made once per value of its kernel and dropped with the kernel."""
import weakref


class KernelTransposes:
    """The transposes of variables' current values, made by `transpose(value)` on first use and again once the
    value changes: another value object, or another `stamp(value)` (PyTorch's in-place version counter)."""

    def __init__(self, transpose, stamp=lambda value: None):
        self._transpose = transpose
        self._stamp = stamp
        # {id(variable): (its value, that value's stamp, the transpose)}; an entry goes with its variable.
        self.kept = {}

    def of(self, kernel):
        """The transpose of `kernel`'s (a Keras variable's) current value."""
        value = kernel.value
        stamp = self._stamp(value)
        kept = self.kept.get(id(kernel))
        if kept is None or kept[0] is not value or kept[1] != stamp:
            if kept is None:
                weakref.finalize(kernel, self.kept.pop, id(kernel), None)
            kept = self.kept[id(kernel)] = (value, stamp, self._transpose(value))
        return kept[2]
