"""A Ctrl-C that Python swallowed is sent again, so that a command still stops.

A command turns SIGINT into `KeyboardInterrupt` (`bilm.commands.exit_on_user_error`). Python runs a signal's
handler in whatever Python code the main thread is in when the signal arrives, and some code cannot pass an
exception on: a garbage collector's callback (JAX registers one, which runs at any collection), a `__del__`, a
weak reference's callback. There the `KeyboardInterrupt` is printed as "Exception ignored in: ..." and lost,
and the command went on as if Ctrl-C had never been pressed (a training run to its end, status 0).

While `redeliver_swallowed_signals()` is active (a context manager, the command's own: it replaces
`sys.unraisablehook`, process-wide), such a `KeyboardInterrupt` prints nothing and its signal is sent to the
main thread again, from another thread a moment later, so that the handler raises it once the swallowing
callback has returned. Other unraisable exceptions go to the previous hook.
"""
import contextlib
import signal
import sys
import threading
import time

# How long the resend waits: the swallowing callback returns before the signal comes back.
RESEND_DELAY_SECONDS = 0.01


@contextlib.contextmanager
def redeliver_swallowed_signals():
    """The block's swallowed `KeyboardInterrupt`s are raised again (see the module's docstring). Does nothing
    outside the main thread, where no signal handler runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = sys.unraisablehook

    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            signum = getattr(unraisable.exc_value, "signal", signal.SIGINT)  # `Terminated` names its SIGTERM
            threading.Thread(target=_send_again, args=(signum,), name="bilm-resend-signal", daemon=True).start()
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _send_again(signum):
    time.sleep(RESEND_DELAY_SECONDS)
    signal.pthread_kill(threading.main_thread().ident, signum)
