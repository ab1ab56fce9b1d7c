"""What bilm runs on here: the Keras backend and how it was chosen, the backends installed, the devices, bilm's
native kernels and the model cache, each with what to do about it."""
import glob
import importlib.util
import json
import os
from importlib import metadata

from bilm.backend import backend_module
from bilm.commands import ScriptArgumentParser, describe_devices
from bilm.io.sources.model_cache import CACHE_ENVIRONMENT_VARIABLE, cache_path
from bilm.ops.native import native_dir
from bilm.utils.backend import BACKENDS, configured_backend


def main(argv=None, prog=None):
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.parse_args(argv)
    for line in report():
        print(line)


def report():
    """The doctor's lines."""
    backend = configured_backend()
    lines = [f"bilm {_version('bilm')}", f"Keras {_version('keras')} on {backend}, {_chosen_by(backend)}."]
    installed = {name: _version(name) for name in BACKENDS if importlib.util.find_spec(name) is not None}
    lines.append("Backends installed: " + (", ".join(f"{name} {version}" for name, version in installed.items())
                                           or "none") + ". Choose one with KERAS_BACKEND=tensorflow|jax|torch.")
    what_runs = backend_module("devices").WHAT_RUNS
    if what_runs:
        lines.append(what_runs)
    lines.append(describe_devices().replace("bilm: running on", "Devices:"))
    directory = native_dir()
    built = sorted(glob.glob(os.path.join(directory, "**", "*.so"), recursive=True))
    state = (f"{len(built)} built in {directory}" if built
             else f"none built yet in {directory} (compiled at first use; g++ or $CXX needed)")
    lines.append(f"Native kernels (bilm's CPU fast paths): {state}.")
    cache = cache_path()
    # The native kernels' folder may sit in the cache's folder: not a model.
    models = [entry for entry in (os.listdir(cache) if os.path.isdir(cache) else [])
              if not entry.startswith(".") and os.path.join(cache, entry) != os.path.abspath(directory)]
    lines.append(f"Model cache: {cache} (${CACHE_ENVIRONMENT_VARIABLE} moves it), "
                 f"{len(models)} entr{'y' if len(models) == 1 else 'ies'}.")
    return lines


def _chosen_by(backend):
    if os.environ.get("KERAS_BACKEND"):
        return f"chosen by KERAS_BACKEND={os.environ['KERAS_BACKEND']}"
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            if json.load(f).get("backend"):
                return f"chosen by {os.path.join(home, 'keras.json')}"
    except (OSError, ValueError, AttributeError):
        pass
    return "Keras's default (KERAS_BACKEND is not set)"


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "(version unknown)"
