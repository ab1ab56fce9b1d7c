"""Running test code on one Keras backend, in a process of its own (the backend is fixed per process).

On JAX and PyTorch the process has no TensorFlow: an import hook answers
every `import tensorflow` as if it were not installed (so the code runs as
on a machine without it), and the process reports whether anything tried.
"""
import json
import os
import sys

import warm_python
from helpers import ROOT, TESTS

BACKENDS = ("tensorflow", "jax", "torch")

# Prepended to the code on JAX and PyTorch: TensorFlow "not installed".
WITHOUT_TENSORFLOW = '''
import importlib.abc, importlib.machinery, sys
class _Absent(importlib.abc.Loader):
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)
    def exec_module(self, module):
        pass
class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            return importlib.machinery.ModuleSpec(name, _Absent(), origin=None)
        return None
sys.meta_path.insert(0, _NoTensorFlow())
'''


def backend_environment(backend, environment=None, without=()):
    """This process's environment for a process on `backend` (CPU only, TensorFlow's logs quiet, no
    `BILM_COMMAND`), without the variables named in `without`, with those of `environment` set."""
    removed = {"BILM_COMMAND", *without}
    return {k: v for k, v in os.environ.items() if k not in removed} | {
        "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""
    } | (environment or {})


def run_on_backend(backend, code, *args, timeout=600, environment=None, check=True):
    """Runs `code` (Python source; `sys.argv[1:]` are `args`) with `KERAS_BACKEND=backend` from the repository
    root, the tests folder on its path, and the variables of `environment` set, in a process forked from a warm
    interpreter (`warm_python`); returns the `CompletedProcess` (text). With `check`, fails the calling test with
    the process's error output if it exits with a nonzero status."""
    prelude = "" if backend == "tensorflow" else WITHOUT_TENSORFLOW
    prelude += f"import sys\nsys.path.insert(0, {TESTS!r})\n"
    result = warm_python.run([sys.executable, "-c", prelude + code, *map(str, args)], cwd=ROOT, capture_output=True,
                             text=True, timeout=timeout, env=backend_environment(backend, environment))
    assert not check or result.returncode == 0, f"on {backend}:\n{result.stderr[-4000:]}"
    return result


def json_result(result):
    """The JSON object on the last line of a `run_on_backend` result's standard output."""
    return json.loads(result.stdout.strip().splitlines()[-1])
