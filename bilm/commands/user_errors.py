"""What the `bin/` scripts share: bad input ends with one clear line, not a traceback."""
import contextlib
import signal
import sys
import threading
import warnings

from bilm.commands.swallowed_signals import redeliver_swallowed_signals
from bilm.errors import UserError
from bilm.training.run.stop_signals import TrainingInterrupted
from bilm.utils.backend import require_tensorflow, require_training_backend

# bilm's own errors for input the user can fix (bad options, vocabularies,
# weight files, checkpoints, data, output paths, a loss that turned NaN),
# and files that do not exist. Anything else is a bug and keeps its traceback.
USER_ERRORS = (UserError, FileNotFoundError)


def exit_unless_tensorflow(what):
    """Ends a script that needs TensorFlow (`what` it does) with one `Error:` line and exit status 1 when Keras
    runs on another backend; call it before importing what needs TensorFlow."""
    _exit_on_user_error_of(require_tensorflow, what)


def exit_unless_training_backend(what):
    """Ends a script that trains (`what` it does) with one `Error:` line and exit status 1 unless Keras runs on
    a backend bilm trains on (TensorFlow, JAX, PyTorch); call it before importing what trains."""
    _exit_on_user_error_of(require_training_backend, what)


def _exit_on_user_error_of(check, what):
    try:
        check(what)
    except UserError as error:
        sys.exit(f"Error: {error}")


@contextlib.contextmanager
def exit_on_user_error():
    """Turns a user error (`bilm.errors.UserError`), or a file the system would
    not read or write, into `sys.exit("Error: ...")` (exit status 1); Ctrl-C
    exits with status 130. Any other exception (a bug) propagates with its
    traceback. Training stopped by a signal (`TrainingInterrupted`) prints its one line,
    what was saved and how to continue, and exits with 128 + the signal's
    number (130 SIGINT, 143 SIGTERM). Inside it a warning is printed as one
    line, `Warning: <message>`.

    SIGINT and SIGTERM stop any phase of the script's work as Ctrl-C does:
    `KeyboardInterrupt` (for SIGTERM, `Terminated`) unwinds it, so that
    files being written are closed or removed on the way (outputs are
    written under temporary names, and resumable ones such as
    `elmo.py`'s `OUT.partial` keep what is complete), then the script exits
    with 130 or 143. A training run handles both itself while it runs. A
    `KeyboardInterrupt` that Python swallowed (raised inside a garbage
    collector's callback, such as JAX's) is raised again
    (`bilm.commands.swallowed_signals`)."""
    format_warning = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    previous = _raise_on_signals()
    try:
        with redeliver_swallowed_signals():
            yield
    except USER_ERRORS as error:
        sys.exit(f"Error: {error}")
    except OSError as error:  # unwritable directory, full disk, permissions...
        sys.exit(f"Error: {describe_os_error(error)}")
    except TrainingInterrupted as interrupted:
        print(interrupted, file=sys.stderr)
        sys.exit(interrupted.exit_status)
    except KeyboardInterrupt as interrupted:
        _exit_stopped(interrupted)
    except Exception as error:
        # A signal that reached library code which turned it into an error of its own (e.g. TensorFlow
        # tracing a function) is still a signal: stopped, not a bug.
        interrupted = _interrupt_in_chain(error)
        if interrupted is None:
            raise
        _exit_stopped(interrupted)
    finally:
        warnings.formatwarning = format_warning
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _exit_stopped(interrupted):
    signum = interrupted.signal if isinstance(interrupted, Terminated) else signal.SIGINT
    print(f"\nStopped by {signum.name}.", file=sys.stderr)
    sys.exit(128 + int(signum))


def _interrupt_in_chain(error):
    """The `KeyboardInterrupt` that `error` was raised from or while handling, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class Terminated(KeyboardInterrupt):
    """SIGTERM reached a `bin/` script: it stops as on Ctrl-C (a `KeyboardInterrupt`), with status 143."""

    signal = signal.SIGTERM


def _raise_terminated(signum, frame):
    raise Terminated()


def _raise_on_signals():
    """Installs handlers that turn SIGINT into `KeyboardInterrupt` (also where the shell started the script
    with SIGINT ignored) and SIGTERM into `Terminated`; returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _raise_terminated}
    previous = {}
    for signum, handler in handlers.items():
        old = signal.signal(signum, handler)
        previous[signum] = signal.SIG_DFL if old is None else old
    return previous


def _one_line_warning(message, category, filename, lineno, line=None):
    return f"Warning: {message}\n"


def describe_os_error(error):
    """One line for an `OSError`: the file it names and what went wrong."""
    reason = error.strerror or str(error)
    if error.filename is not None:
        return f"cannot use {error.filename}: {reason}."
    return f"{reason}."
