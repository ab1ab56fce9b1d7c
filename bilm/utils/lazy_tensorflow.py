"""`tf`, TensorFlow imported at its first use: for modules whose names (a registry's classes, their
constants) other backends read, while only their code paths on TensorFlow run TensorFlow."""


class _TensorFlow:
    """Stands for the `tensorflow` module: reading an attribute imports it (once) and reads it there."""

    def __getattr__(self, name):
        import tensorflow

        return getattr(tensorflow, name)


tf = _TensorFlow()
