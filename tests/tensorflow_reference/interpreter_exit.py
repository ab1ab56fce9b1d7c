"""Python generators behind `tf.data` that let the interpreter exit.

`tf.data.Dataset.from_generator` calls its generator from a background
(prefetch) thread. If the interpreter starts to shut down while such a call
is under way, for instance because a script keeps a half-read iterator in a
global, the call can never take the GIL back, and the iterator's
destructor, run during shutdown, waits for it forever: the process hangs
after its last line.

`ends_at_exit` wraps the stream: an `atexit` hook (which runs before the
shutdown) marks every stream ended, waits for the calls under way to
return, and then for a quiet moment in which `tf.data` finishes the
ended streams. A stream asked for more after that ends at once. The hook
waits at most `EXIT_WAIT_SECONDS`.
"""
import atexit
import threading
import time

EXIT_WAIT_SECONDS = 30.0
# How long no stream must have been entered or left before shutdown goes
# on: time for tf.data to finish a stream that has just ended.
QUIET_SECONDS = 0.1


class _Streams:
    """What the exit hook needs to know about the wrapped streams."""

    def __init__(self):
        self.condition = threading.Condition()
        self.exiting = False
        self.busy = 0  # calls under way
        self.last_event = time.monotonic()

    def enter(self):
        """False once exiting (the stream should end); otherwise counts a call."""
        with self.condition:
            if self.exiting:
                return False
            self.busy += 1
            self.last_event = time.monotonic()
            return True

    def leave(self):
        with self.condition:
            self.busy -= 1
            self.last_event = time.monotonic()
            self.condition.notify_all()

    def ended(self):
        with self.condition:
            self.last_event = time.monotonic()
            self.condition.notify_all()

    def wait_at_exit(self, timeout=EXIT_WAIT_SECONDS, quiet=QUIET_SECONDS):
        with self.condition:
            self.exiting = True
            deadline = time.monotonic() + timeout
            while True:
                now = time.monotonic()
                if now >= deadline or (self.busy == 0 and now - self.last_event >= quiet):
                    return
                self.condition.wait(min(deadline - now, quiet))


_STREAMS = _Streams()
_END = object()  # marks an exhausted iterator
_hook_registered = False


def ends_at_exit(iterable):
    """Yields the items of `iterable`, ending early once the interpreter
    begins to exit (see the module docstring). The first stream registers
    the exit hook; importing this module registers nothing."""
    global _hook_registered
    if not _hook_registered:
        atexit.register(_STREAMS.wait_at_exit)
        _hook_registered = True
    iterator = iter(iterable)
    try:
        while _STREAMS.enter():
            try:
                item = next(iterator, _END)
            finally:
                _STREAMS.leave()
            if item is _END:
                return
            yield item
    finally:
        _STREAMS.ended()
