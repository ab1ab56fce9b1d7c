"""`import bilm` changes nothing process-wide; a command's start is quiet and stops in one line on a signal."""
import ast
import gc
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from bilm.commands import exit_on_user_error
from bilm.utils import start_up
from bilm.utils.start_up import COMMAND_VARIABLE, STARTING_MESSAGE, is_bilm_command
from helpers import ROOT

# Nothing imported before bilm: whatever TensorFlow and Keras change while they load is bilm's doing.
UNTOUCHED = """
import gc, os, signal, sys, threading, logging
def state():
    fds = {fd: (os.fstat(int(fd)).st_ino, os.fstat(int(fd)).st_dev) for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")}
    return (dict(os.environ), os.fstat(2).st_ino, signal.getsignal(signal.SIGINT),
            signal.getsignal(signal.SIGTERM), list(logging.getLogger().handlers), logging.getLogger().level,
            gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
before = state()
import bilm, bilm.training
after = state()
print([name for name, b, a in zip(["environ", "fd 2", "SIGINT", "SIGTERM", "handlers", "level", "gc", "gc threshold",
                                   "gc frozen"], before, after) if b != a])
"""


def _clean_environment(**extra):
    return {k: v for k, v in os.environ.items()
            if k not in (COMMAND_VARIABLE, "TF_CPP_MIN_LOG_LEVEL") and not k.startswith("TF2_")} | extra


@pytest.mark.slow
def test_importing_bilm_first_leaves_environment_descriptors_signals_and_logging_as_they_were():
    result = subprocess.run([sys.executable, "-c", UNTOUCHED], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=_clean_environment(TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "[]"


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cyclic_collector_pauses_for_the_imports_then_is_as_it_was(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with start_up._cyclic_collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() == enabled
        # A command's start also moves what the process holds out of later collections.
        frozen = gc.get_freeze_count()
        made = [[] for _ in range(1000)]
        with start_up._cyclic_collector_paused(freeze=True):
            assert not gc.isenabled()
        assert gc.isenabled() == enabled and gc.get_freeze_count() >= frozen + len(made)
    finally:
        (gc.enable if was else gc.disable)()


def test_a_process_is_a_command_by_its_variable_or_by_running_a_module_of_bilm(monkeypatch):
    monkeypatch.delenv(COMMAND_VARIABLE, raising=False)
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "pytest"])
    assert not is_bilm_command()
    monkeypatch.setattr(sys, "orig_argv", ["python", "-X", "dev", "-m", "bilm.beam", "--help"])
    assert is_bilm_command()
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "pytest"])
    monkeypatch.setenv(COMMAND_VARIABLE, "1")
    assert is_bilm_command()


def test_a_signal_that_library_code_turned_into_its_own_error_still_stops_the_command(capsys):
    def traced():
        try:
            raise KeyboardInterrupt()
        except KeyboardInterrupt as interrupted:
            raise TypeError("a function's signature, as TensorFlow reports a failed trace") from interrupted

    with pytest.raises(SystemExit) as exited, exit_on_user_error():
        traced()
    assert exited.value.code == 130
    assert capsys.readouterr().err.strip() == "Stopped by SIGINT."
    with pytest.raises(TypeError), exit_on_user_error():
        raise TypeError("a bug keeps its traceback")


def test_a_signal_that_an_extension_module_turned_into_an_import_error_still_stops_the_start(monkeypatch, capsys):
    # A signal that lands while a compiled module initialises reaches the start as
    # `ImportError: initialization failed`, not as the handler's own exception.
    def import_interrupted(**_):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler raises here, or lets the import finish and stops after it
        except BaseException:
            raise ImportError("initialization failed") from None

    monkeypatch.setattr(start_up, "on_tensorflow", lambda: True)
    monkeypatch.setattr(start_up, "import_tensorflow", import_interrupted)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as exited:
            start_up._start_command()
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        start_up._state["stopped_by"] = None
    assert exited.value.code == 130
    assert capsys.readouterr().err.strip() == STARTING_MESSAGE.format("SIGINT")

    monkeypatch.setattr(start_up, "import_tensorflow", lambda **_: (_ for _ in ()).throw(ImportError("no module")))
    try:
        with pytest.raises(ImportError, match="no module"):  # without a signal, the error is the error
            start_up._start_command()
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


_RUN_SECONDS = {}


def _seconds_to_finish(command):
    """How long `command` runs, unsignalled, until it stops on its missing file (measured once per command)."""
    key = tuple(command)
    if key not in _RUN_SECONDS:
        started = time.monotonic()
        result = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=120,
                                env=_clean_environment())
        assert result.returncode in (0, 1, 2), result.stderr[-2000:]
        _RUN_SECONDS[key] = time.monotonic() - started
    return _RUN_SECONDS[key]


def _interrupt_while_starting(command, delay, signum):
    """Starts `command` (args after python), sends `signum` after `delay` s; (exit status, stderr, seconds)."""
    process = subprocess.Popen([sys.executable, *command], cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=_clean_environment())
    time.sleep(delay)
    sent = time.monotonic()
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    return process.returncode, err, time.monotonic() - sent


# Arguments that keep each command busy past its start (a missing file is found only after start-up).
COMMANDS = {
    "bin/elmo.py": ["missing.txt", "out.hdf5", "--options_file", "missing.json", "--weight_file", "missing.hdf5"],
    "bin/train_elmo.py": ["--size", "small", "--train_prefix", "missing/*", "--vocab_file", "missing.txt",
                          "--save_dir", "missing"],
    "bin/run_test.py": ["--test_prefix", "missing/*", "--vocab_file", "missing.txt", "--save_dir", "missing"],
    "bin/restart.py": ["--train_prefix", "missing/*", "--vocab_file", "missing.txt", "--save_dir", "missing"],
    "bin/dump_weights.py": ["--save_dir", "missing", "--outfile", "out.hdf5"],
    "bin/dump_bilm_embeddings.py": ["missing.json", "missing.hdf5", "missing.txt", "missing.vocab", "out.hdf5"],
    "bin/dump_token_embeddings.py": ["missing.json", "missing.hdf5", "missing.vocab", "out.hdf5"],
    "bin/build_vocab.py": ["--train_prefix", "missing/*", "--vocab_file", "vocab.txt"],
    "bin/quickstart.py": ["--help"],
}


def _finished_first(status, err, signum):
    """Whether the command ended before the signal: its exit status, or, where the signal came as the
    interpreter exited after the command's last line (its `Error:`), the signal's default end."""
    lines = [line for line in err.splitlines() if line.strip()]
    return status in (0, 1, 2) or (status == -signum and bool(lines) and lines[-1].startswith("Error: "))


def _interrupt_before_it_finishes(command, moment, signum, measured=None):
    """Sends `signum` at `moment` (a fraction) of the measured run of `measured` (default: `command` itself);
    where a busy machine made the measured run slower than this one, so that the command finished first, comes
    earlier (up to 3 times). (exit status, stderr, seconds)."""
    delay = moment * _seconds_to_finish(measured or command)
    status, err, seconds = _interrupt_while_starting(command, delay, signum)
    for _ in range(3):
        if not _finished_first(status, err, signum):
            return status, err, seconds
        delay /= 2
        status, err, seconds = _interrupt_while_starting(command, delay, signum)
    if _finished_first(status, err, signum):
        pytest.fail(f"the command finished before its signal at {delay:.2f} s: pick earlier moments ({err[-300:]})")
    return status, err, seconds


def _assert_stopped(status, err, seconds, signum, run_seconds):
    """`seconds` from the signal to the end: a signal during the imports lets them finish first, so the stop
    may take as long as the whole measured start (`run_seconds`), which a busy machine stretches; twice that,
    and at least 10 s, tells a prompt stop from one that carried on."""
    name = signal.Signals(signum).name
    assert status == 128 + signum, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    # One line: the start-up's own, or the command's once its work began; never a traceback.
    assert lines[-1] in (STARTING_MESSAGE.format(name), f"Stopped by {name}."), err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    assert seconds < max(10.0, 2 * run_seconds), (seconds, run_seconds)


def _script_code(path):
    """A script's statements after its docstring, with its subcommand's name left out."""
    module = ast.parse(open(os.path.join(ROOT, path)).read())
    body = module.body[1:] if isinstance(module.body[0], ast.Expr) else module.body
    return [re.sub(r"subcommand_main\('[a-z-]+'\)", "subcommand_main(NAME)", ast.unparse(node)) for node in body]


def test_every_script_is_the_same_start_of_its_subcommand():
    """Each bin/ script sets `BILM_COMMAND` before it imports bilm (a command's start) and runs its subcommand's
    main: the same code, but for the name, so that a signal during one script's start is one during any."""
    codes = {script: _script_code(script) for script in COMMANDS}
    assert len({tuple(code) for code in codes.values()}) == 1, codes
    assert codes["bin/elmo.py"][:2] == ["import os", "os.environ.setdefault('BILM_COMMAND', '1')"]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["bin/build_vocab.py"])
def test_ctrl_c_while_a_script_starts_ends_it_in_one_line(script):
    # Every script is the same start (`test_every_script_is_the_same_start_of_its_subcommand`) before its own
    # work: three of them (embedding and training below, `test_a_signal_at_many_moments_of_the_start_ends_in_one_line`;
    # the vocabulary here) stand for all. The moment is a fraction of one script's measured run, the quick start's
    # usage, measured once and not once a script.
    command = [script, *COMMANDS[script]]
    reference = ["bin/quickstart.py", *COMMANDS["bin/quickstart.py"]]
    status, err, seconds = _interrupt_before_it_finishes(command, 0.3, signal.SIGINT, measured=reference)
    _assert_stopped(status, err, seconds, signal.SIGINT, _seconds_to_finish(reference))


BEAM_COMMAND = ["-m", "bilm.beam", "--input", "missing.txt", "--output_dir", "out", "--model", "missing"]


@pytest.mark.slow
# Moments as fractions of the command's whole run, so that a faster machine moves them along. The scripts' start
# is signalled early and late; `python -m bilm.beam`'s late, in Beam's imports after the start every command
# shares (`test_a_signal_during_a_commands_later_imports_lets_them_finish_then_stops_in_one_line`).
@pytest.mark.parametrize("command, signum, moment", [
    *[(["bin/elmo.py", *COMMANDS["bin/elmo.py"]], signal.SIGINT, moment) for moment in (0.15, 0.5)],
    *[(["bin/train_elmo.py", *COMMANDS["bin/train_elmo.py"]], signal.SIGTERM, moment) for moment in (0.15, 0.5)],
    (BEAM_COMMAND, signal.SIGINT, 0.5),
])
def test_a_signal_at_many_moments_of_the_start_ends_in_one_line(command, signum, moment):
    status, err, seconds = _interrupt_before_it_finishes(command, moment, signum)
    _assert_stopped(status, err, seconds, signum, _seconds_to_finish(command))


def test_a_signal_during_the_imports_lets_them_finish_then_stops_in_one_line(monkeypatch, capsys):
    # An exception raised inside TensorFlow's import could leave its C++ libraries half set up, and the process
    # then crashed at its exit (SIGSEGV or SIGABRT, without a word): the import finishes first.
    finished = []

    def importing(filter_load_logs):
        start_up._stop_while_starting(signal.SIGINT, None)  # the signal arrives in the middle
        finished.append(True)

    monkeypatch.setattr(start_up, "import_tensorflow", importing)
    monkeypatch.setattr(start_up, "on_tensorflow", lambda: True)
    monkeypatch.setattr(start_up.signal, "signal", lambda signum, handler: None)
    monkeypatch.setitem(start_up._state, "stopped_by", None)
    with pytest.raises(start_up.StoppedWhileStarting) as stopped:
        start_up._start_command()
    assert finished == [True] and stopped.value.code == 130
    assert capsys.readouterr().err.strip() == STARTING_MESSAGE.format("SIGINT")
    # A second signal stops the imports at once.
    monkeypatch.setitem(start_up._state, "stopped_by", None)
    monkeypatch.setitem(start_up._state, "importing", True)
    start_up._stop_while_starting(signal.SIGTERM, None)
    with pytest.raises(start_up.StoppedWhileStarting):
        start_up._stop_while_starting(signal.SIGINT, None)


def test_a_signal_during_a_commands_later_imports_lets_them_finish_then_stops_in_one_line(monkeypatch, capsys):
    # Apache Beam's imports in `python -m bilm.beam` (`bilm.beam`), after the start's own: the same wait. A signal
    # that stopped them half-way aborted the process (status -6) as it exited.
    finished = []
    monkeypatch.setitem(start_up._state, "stopped_by", None)
    monkeypatch.setattr(start_up.signal, "getsignal", lambda signum: start_up._stop_while_starting)
    with pytest.raises(start_up.StoppedWhileStarting) as stopped:
        with start_up.command_imports():
            start_up._stop_while_starting(signal.SIGINT, None)  # the signal arrives in the middle
            finished.append(True)
    assert finished == [True] and stopped.value.code == 130 and not start_up._state["importing"]
    assert capsys.readouterr().err.strip() == STARTING_MESSAGE.format("SIGINT")
    # Where the start's handlers are not in place (a user's program, or the command's own handlers), the block
    # changes nothing.
    monkeypatch.setitem(start_up._state, "stopped_by", None)
    monkeypatch.setattr(start_up.signal, "getsignal", lambda signum: signal.default_int_handler)
    with start_up.command_imports():
        finished.append(start_up._state["importing"])
    assert finished == [True, False]
