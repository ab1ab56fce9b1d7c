"""tests/warm_python.py: a command forked from the warm server sees and ends as under `python` itself."""
import json
import os
import signal
import subprocess
import sys

import pytest

import warm_python

# What a command sees of its start, printed as JSON; its exit status is its first argument.
VIEW = """
import json, os, sys
main = sys.modules["__main__"]
print(json.dumps({"argv": sys.argv, "orig_argv": sys.orig_argv[1:], "path0": sys.path[0], "cwd": os.getcwd(),
                  "name": __name__, "file": globals().get("__file__"), "variable": os.environ.get("WARM_TEST"),
                  "main_is_this": main.__dict__ is globals(), "stdin": sys.stdin.read(),
                  "session_leader": os.getsid(0) == os.getpid()}))
print("to standard error", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def _both(args, **kwargs):
    """`subprocess.run`'s and `warm_python.run`'s results of the same command, the first warm one's server
    started first."""
    return [module.run(args, capture_output=True, text=True, timeout=300, **kwargs)
            for module in (subprocess, warm_python)]


@pytest.fixture
def script(tmp_path):
    (tmp_path / "package").mkdir()
    (tmp_path / "package" / "__init__.py").write_text("")
    (tmp_path / "package" / "view.py").write_text(VIEW)
    (tmp_path / "view.py").write_text(VIEW)
    return tmp_path


@pytest.mark.parametrize("form", ["script", "-c", "-m"])
def test_a_command_sees_its_arguments_paths_folder_and_environment_as_under_python(script, form, tmp_path):
    command = {"script": [str(script / "view.py")], "-c": ["-c", VIEW], "-m": ["-m", "package.view"]}[form]
    # The folder finds `package` (as `sys.path[0]`), so the environment differs from the tests' only in a variable
    # read after the start, and the command shares their warm server.
    cold, warm = _both([sys.executable, *command, "3", "x"], cwd=script, input="the input",
                       env=dict(os.environ, WARM_TEST="seen"))
    assert warm.returncode == cold.returncode == 3
    assert json.loads(warm.stdout) == json.loads(cold.stdout)
    assert json.loads(warm.stdout)["stdin"] == "the input" and json.loads(warm.stdout)["variable"] == "seen"
    assert warm.stderr.endswith("to standard error\n") and cold.stderr.endswith("to standard error\n")


def test_the_command_is_forked_from_a_server_that_imported_keras():
    code = "import sys; print('keras' in sys.modules)"
    cold, warm = _both([sys.executable, "-c", code])
    assert (cold.stdout, warm.stdout) == ("False\n", "True\n")


def test_an_uncaught_error_a_signal_and_a_new_session_end_as_under_python(tmp_path):
    cold, warm = _both([sys.executable, "-c", "raise ValueError('the error')"])
    assert cold.returncode == warm.returncode == 1
    assert warm.stderr.splitlines()[0] == "Traceback (most recent call last):"
    assert warm.stderr.splitlines()[-1] == cold.stderr.splitlines()[-1] == "ValueError: the error"

    for module in (subprocess, warm_python):
        process = module.Popen([sys.executable, "-c", "import os, time; print(os.getsid(0) == os.getpid(), "
                                "flush=True); time.sleep(60)"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
        assert process.stdout.readline() == "True\n" and process.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == -signal.SIGTERM
        process.stdout.close()


# An exit of each kind, and what Python does at any exit: wait for a thread, run `atexit`, flush the streams.
ENDING = """
import atexit, sys, threading, time
sys.stdout = open(1, "w", closefd=False)  # buffered (where PYTHONUNBUFFERED is set too)
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.3), print("the thread ended", file=sys.stderr))).start()
sys.stdout.write("buffered, ")
{}
"""


@pytest.mark.parametrize("ending", ["pass", "sys.exit(4)", "sys.exit('the message')", "raise KeyboardInterrupt",
                                    "sys.exit(None)", "1 / 0"])
def test_an_exit_of_each_kind_ends_as_under_python(ending):
    cold, warm = _both([sys.executable, "-c", ENDING.format(ending)])
    assert warm.returncode == cold.returncode
    assert warm.stdout == cold.stdout == "buffered, atexit ran\n"
    assert warm.stderr.splitlines()[-1:] == cold.stderr.splitlines()[-1:]
    assert "the thread ended" in warm.stderr


def test_what_it_cannot_start_as_python_would_runs_with_subprocess():
    assert warm_python._warm_args([sys.executable, "-u", "-c", "pass"], {}) is None
    assert warm_python._warm_args([sys.executable, "-c", "pass"], {"shell": True}) is None
    assert warm_python._warm_args(["bash", "-c", "true"], {}) is None
    assert warm_python._warm_args([sys.executable, "x.py", "-u"], {"restore_signals": True}) == ["x.py", "-u"]
    result = warm_python.run([sys.executable, "-I", "-c", "import sys; print('keras' in sys.modules)"],
                             capture_output=True, text=True, timeout=300)
    assert result.stdout == "False\n"
