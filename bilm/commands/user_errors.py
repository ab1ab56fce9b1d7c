"""What the `bin/` scripts share: bad input ends with one clear line, not a traceback."""
import contextlib
import sys
import warnings

from bilm.errors import UserError
from bilm.training.loop import TrainingInterrupted

# bilm's own errors for input the user can fix (bad options, vocabularies,
# weight files, checkpoints, data, output paths, a loss that turned NaN),
# and files that do not exist. Anything else is a bug and keeps its traceback.
USER_ERRORS = (UserError, FileNotFoundError)


@contextlib.contextmanager
def exit_on_user_error():
    """Turns a user error (`bilm.errors.UserError`), or a file the system would
    not read or write, into `sys.exit("Error: ...")` (exit status 1); Ctrl-C
    exits with status 130. Any other exception (a bug) propagates with its
    traceback. Training stopped by a signal (`TrainingInterrupted`) prints its one line,
    what was saved and how to continue, and exits with 128 + the signal's
    number (130 SIGINT, 143 SIGTERM). Inside it a warning is printed as one
    line, `Warning: <message>`."""
    format_warning = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        yield
    except USER_ERRORS as error:
        sys.exit(f"Error: {error}")
    except OSError as error:  # unwritable directory, full disk, permissions...
        sys.exit(f"Error: {describe_os_error(error)}")
    except TrainingInterrupted as interrupted:
        print(interrupted, file=sys.stderr)
        sys.exit(interrupted.exit_status)
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        sys.exit(130)
    finally:
        warnings.formatwarning = format_warning


def _one_line_warning(message, category, filename, lineno, line=None):
    return f"Warning: {message}\n"


def describe_os_error(error):
    """One line for an `OSError`: the file it names and what went wrong."""
    reason = error.strerror or str(error)
    if error.filename is not None:
        return f"cannot use {error.filename}: {reason}."
    return f"{reason}."
