"""`import bilm` changes nothing process-wide: no exit hook, no environment change; its public subpackages are
its attributes (`bilm.training` after `import bilm` alone)."""
import os
import subprocess
import sys

import pytest

from helpers import ROOT

SCRIPT = """
import atexit, os
import h5py, keras, numpy, tensorflow
before = (atexit._ncallbacks(), dict(os.environ))
import bilm
# A public subpackage that `import bilm` leaves unimported, read as an attribute.
module = bilm.training.train_from_files.__module__
try:
    bilm.no_such_name
except AttributeError as error:
    print(error)
print(atexit._ncallbacks() - before[0], dict(os.environ) == before[1], module)
"""


@pytest.mark.slow
def test_importing_bilm_registers_no_exit_hook_and_changes_no_setting():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["module 'bilm' has no attribute 'no_such_name'",
                                          "0 True bilm.training.run.from_files"]


# Python's finders, each wrapped to find none of `hidden` (children inherit PYTHONPATH): as on a machine where
# they are not installed, `import` fails and `importlib.util.find_spec` is None.
HIDING = """
import sys

HIDDEN = {hidden!r}

class Hiding:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)

sys.meta_path[:] = [Hiding(finder) for finder in sys.meta_path]
"""


@pytest.mark.parametrize("keras_backend, hidden, named", [
    (None, ("tensorflow",), "Keras's backend is TensorFlow, Keras's default where KERAS_BACKEND is not set, and "
                            "tensorflow is not installed: set KERAS_BACKEND to an installed one (jax, torch), "
                            "e.g. export KERAS_BACKEND=jax (bilm runs on each)."),
    ("jax", ("jax", "tensorflow"), "Keras's backend is KERAS_BACKEND=jax, and jax is not installed: set "
                                   "KERAS_BACKEND to an installed one (torch), e.g. export KERAS_BACKEND=torch"),
])
def test_without_keras_backend_installed_import_and_scripts_end_in_one_line_naming_the_fix(
        tmp_path, keras_backend, hidden, named):
    (tmp_path / "sitecustomize.py").write_text(HIDING.format(hidden=set(hidden)))
    env = {key: value for key, value in os.environ.items() if key not in ("KERAS_BACKEND", "BILM_COMMAND")}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]), KERAS_HOME=str(tmp_path / "keras_home"))
    if keras_backend:
        env["KERAS_BACKEND"] = keras_backend
    imported = subprocess.run([sys.executable, "-c", "import bilm"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
    assert imported.returncode == 1
    assert imported.stderr.strip().splitlines()[-1].startswith(f"bilm.utils.start_up.MissingBackendError: {named}")
    script = subprocess.run([sys.executable, "bin/elmo.py", "--help"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert script.returncode == 1 and script.stdout == ""
    assert script.stderr.splitlines() == [script.stderr.strip()] and script.stderr.startswith(f"Error: {named}")
