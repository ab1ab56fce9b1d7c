"""A value, or a flag, that a `with` block sets for its own thread: how a caller tells what a function traced
inside it holds."""
import contextlib
import threading


class ThreadValue:
    """`default`, except inside `with value.holding(x):` in the thread that entered it, where it is `x` (nested
    blocks restore the outer value on exit)."""

    def __init__(self, default=None):
        self._local = threading.local()
        self._default = default

    @contextlib.contextmanager
    def holding(self, value):
        previous = self.get()
        self._local.value = value
        try:
            yield
        finally:
            self._local.value = previous

    def get(self):
        return getattr(self._local, "value", self._default)


class ThreadFlag(ThreadValue):
    """Off, except inside `with flag.on():` in the thread that entered it
    (nested blocks restore the outer state on exit)."""

    def __init__(self):
        super().__init__(default=False)

    def on(self):
        return self.holding(True)

    def is_on(self):
        return self.get()
