"""What the `bin/` scripts share: bad input ends with one clear line, not a trace."""
import contextlib
import sys

# Bad options, vocabularies, weight files, checkpoints and data raise
# ValueError or a subclass (OptionsError, WeightFileError, CheckpointError);
# missing files raise FileNotFoundError; a loss that turned NaN raises
# FloatingPointError.
USER_ERRORS = (ValueError, FileNotFoundError, FloatingPointError)


@contextlib.contextmanager
def exit_on_user_error():
    """Turns a `USER_ERRORS` exception into `sys.exit("Error: ...")`."""
    try:
        yield
    except USER_ERRORS as e:
        sys.exit(f"Error: {e}")
