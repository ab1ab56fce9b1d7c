"""A flag that a `with` block turns on for its own thread: how a caller asks what a function traced inside it holds."""
import contextlib
import threading


class ThreadFlag:
    """Off, except inside `with flag.on():` in the thread that entered it
    (nested blocks restore the outer state on exit)."""

    def __init__(self):
        self._local = threading.local()

    @contextlib.contextmanager
    def on(self):
        previous = self.is_on()
        self._local.on = True
        try:
            yield
        finally:
            self._local.on = previous

    def is_on(self):
        return getattr(self._local, "on", False)
