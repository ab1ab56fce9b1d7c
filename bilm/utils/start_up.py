"""What `import bilm` does before anything else: import Keras (and TensorFlow under it), changing nothing process-wide.

Where Keras runs on another backend (`KERAS_BACKEND=jax` or `torch`,
`bilm.utils.backend`), TensorFlow is not imported at all: it need not be
installed. Otherwise, in a user's program, `import bilm` imports TensorFlow and Keras and then
puts back the environment variables TensorFlow sets while it loads
(`TF2_BEHAVIOR`, `TPU_ML_PLATFORM`, ...), so that the process's
environment, file descriptors, signal handlers and logging are as the
program left them.

In one of bilm's own commands, and only there, the start is a command's:
- TensorFlow's load-time log lines are filtered by `TF_CPP_MIN_LOG_LEVEL`
  (3 unless set; see `bilm.utils.tensorflow_logs`), so a script starts
  quietly;
- SIGINT (Ctrl-C) and SIGTERM end the start-up, which has nothing to save
  yet, with one line (`Stopped by SIGINT while starting.`) and exit status
  130 or 143 instead of a traceback. The command's own handlers
  (`bilm.commands.exit_on_user_error`, a training run's) take over when its
  work begins;
- what the imports made is frozen out of Python's cyclic collections
  (`gc.freeze`), which were paused while they ran. In a user's program
  the collector is paused for the imports too, and then left as it was.

A process is one of bilm's commands when it sets `COMMAND_VARIABLE` to 1
before importing bilm (every `bin/` script does), runs the `bilm` command,
`python -m bilm` or `python -m bilm.<subpackage>` (the Beam pipeline).
"""
import contextlib
import gc
import os
import signal
import sys
import threading

from bilm.errors import UserError
from bilm.utils.backend import missing_backend_message, on_tensorflow
from bilm.utils.tensorflow_logs import import_tensorflow

COMMAND_VARIABLE = "BILM_COMMAND"
STARTING_MESSAGE = "Stopped by {} while starting."
_state = {"importing": False, "stopped_by": None}


def is_bilm_command():
    """Whether this process runs one of bilm's commands (see the module's docstring)."""
    if os.environ.get(COMMAND_VARIABLE) == "1":
        return True
    argv = getattr(sys, "orig_argv", [])
    if any(flag == "-m" and (module == "bilm" or module.startswith("bilm.")) for flag, module in zip(argv, argv[1:])):
        return True
    # The `bilm` command installed by pip (its entry point script).
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "bilm"


class MissingBackendError(UserError, ImportError):
    """Keras's backend (`KERAS_BACKEND`, TensorFlow where it is not set) is not installed; the message names
    the backends that are."""


def start_up():
    """Imports Keras (on TensorFlow: TensorFlow first) for `bilm/__init__.py`: as a command starts, or as a
    library. Where Keras's backend is not installed, a command ends with one line naming the fix (status 1),
    and an import raises `MissingBackendError` with that line."""
    missing = missing_backend_message() if "keras" not in sys.modules else None
    if missing is not None:
        if is_bilm_command():
            sys.stderr.write(f"Error: {missing}\n")
            raise SystemExit(1)
        raise MissingBackendError(missing)
    if is_bilm_command():
        _start_command()
    else:
        _import_leaving_environment()


def _start_command():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if threading.current_thread() is threading.main_thread():
        # Also where the shell started the command with SIGINT ignored (a background job), as the
        # command's own handlers do later (`bilm.commands.exit_on_user_error`).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stop_while_starting)
    # The command's process is its own: what the imports make lives as long as it does, so it is frozen out of
    # the cyclic collections (`gc.freeze`).
    with _signals_after_the_imports(), _cyclic_collector_paused(freeze=True):
        if on_tensorflow():
            import_tensorflow(filter_load_logs=True)
        import keras  # noqa: F401


@contextlib.contextmanager
def _cyclic_collector_paused(freeze=False):
    """Python's cyclic garbage collector paused for the block, then as it was; with `freeze`, what the process
    holds is first moved out of its collections (`gc.freeze`). The imports of Keras and its backend make
    hundreds of thousands of objects and almost no garbage, and the collections they set off took a fifth of
    the import's time (docs/performance.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


@contextlib.contextmanager
def command_imports():
    """Around a command's later imports of libraries with compiled modules (Apache Beam's, `bilm.beam`): while
    the start's handlers are in place, a SIGINT or SIGTERM during the block is acted on once the imports end (one
    line, exit status 128 + its number), as during the start's own imports. Elsewhere (a user's program, or once
    the command's own handlers took over) the block changes nothing."""
    if _state["importing"] or signal.getsignal(signal.SIGINT) is not _stop_while_starting:
        yield
        return
    with _signals_after_the_imports():
        yield


@contextlib.contextmanager
def _signals_after_the_imports():
    """The block's signal (`_stop_while_starting` notes it) stops the command once the block ends, or at once as
    `StoppedWhileStarting` where it turned the block's code into another exception; other errors pass."""
    _state["importing"] = True
    try:
        yield
    except BaseException:
        signum = _state["stopped_by"]
        if signum is None:
            raise
        # Said here, once standard error is the process's own again (import_tensorflow's redirect). The
        # signal's exception may reach here as another: an extension module that was initialising when it
        # came raises `ImportError: initialization failed` in its place.
        _say_stopped(signum)
        raise StoppedWhileStarting(signum) from None
    finally:
        _state["importing"] = False
    if _state["stopped_by"] is not None:  # a signal during the imports, which were left to finish
        _say_stopped(_state["stopped_by"])
        raise StoppedWhileStarting(_state["stopped_by"])


class StoppedWhileStarting(SystemExit):
    """A signal reached a command while it started: exit status 128 + its number, without a traceback."""

    def __init__(self, signum):
        super().__init__(128 + signum)
        self.signum = signum


def _stop_while_starting(signum, frame):
    """A signal while the command starts. During the imports it is noted, and acted on once they end: an
    exception raised inside TensorFlow's import can leave its C++ libraries half set up, and the process then
    crashed as it exited (SIGSEGV or SIGABRT, without a word). A second signal stops the imports at once."""
    if _state["stopped_by"] is None:
        _state["stopped_by"] = signum
        if _state["importing"]:
            return
    if not _state["importing"]:
        _say_stopped(signum)
    raise StoppedWhileStarting(signum)


def _say_stopped(signum):
    sys.stderr.write(f"\n{STARTING_MESSAGE.format(signal.Signals(signum).name)}\n")
    sys.stderr.flush()


def _import_leaving_environment():
    tensorflow = on_tensorflow()
    if "keras" in sys.modules and ("tensorflow" in sys.modules or not tensorflow):
        return
    before = dict(os.environ)
    try:
        with _cyclic_collector_paused():
            if tensorflow:
                import_tensorflow()
            import keras  # noqa: F401
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
