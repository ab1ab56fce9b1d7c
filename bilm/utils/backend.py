"""Which Keras backend runs bilm, and whether TensorFlow's fast paths may run.

bilm's network is written in `keras.ops` and runs on every Keras 3 backend
(TensorFlow, JAX, PyTorch). On TensorFlow, its CPU fast paths (bilm's C++
kernels, the packed recurrence, the char CNN's table loop) run instead of
the portable code, which they are tested against; the portable code can be
asked for there too, for one thread, with `PORTABLE.on()`.

What only TensorFlow does (tf.data, SavedModel, TF-Hub conversion, graph
batching, training) calls `require_tensorflow`, which says so in one line on
the other backends.
"""
import json
import os
import sys

from bilm.errors import UserError
from bilm.utils.thread_flag import ThreadFlag

BACKENDS = ("tensorflow", "jax", "torch")
# On (`with PORTABLE.on():`, this thread): layers run their portable `keras.ops` code on TensorFlow too.
PORTABLE = ThreadFlag()


def configured_backend():
    """The Keras backend this process uses (`"tensorflow"`, `"jax"`, `"torch"`, ...), without importing Keras
    when it is not imported yet: `KERAS_BACKEND`, else the `backend` of `$KERAS_HOME/keras.json`
    (`~/.keras/keras.json`), else TensorFlow, as Keras decides."""
    if "keras" in sys.modules and hasattr(sys.modules["keras"], "backend"):
        return sys.modules["keras"].backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def installed_backends():
    """The Keras backends whose library is installed (`BACKENDS` order), found without importing them."""
    import importlib.util

    return [name for name in BACKENDS if importlib.util.find_spec(name) is not None]


def missing_backend_message():
    """One line naming the fix where Keras's backend (`configured_backend`) is not installed, else None."""
    import importlib.util

    backend = configured_backend()
    if backend not in BACKENDS or importlib.util.find_spec(backend) is not None:
        return None
    chosen = (f"KERAS_BACKEND={backend}" if os.environ.get("KERAS_BACKEND")
              else "TensorFlow, Keras's default where KERAS_BACKEND is not set")
    installed = installed_backends()
    fix = (f"set KERAS_BACKEND to an installed one ({', '.join(installed)}), e.g. export "
           f"KERAS_BACKEND={installed[0]}" if installed else "install one (pip install jax, torch or tensorflow)")
    return f"Keras's backend is {chosen}, and {backend} is not installed: {fix} (bilm runs on each)."


def on_tensorflow():
    """Whether Keras runs on TensorFlow in this process."""
    return configured_backend() == "tensorflow"


def fast_paths():
    """Whether a layer may run TensorFlow's fast paths: Keras runs on TensorFlow and this thread did not ask
    for the portable code (`PORTABLE`)."""
    return on_tensorflow() and not PORTABLE.is_on()


def require_tensorflow(what):
    """Raises `UserError` unless Keras runs on TensorFlow: `what` (e.g. "a SavedModel export") needs it."""
    backend = configured_backend()
    if backend != "tensorflow":
        raise UserError(f"{what} needs TensorFlow, and Keras runs on {backend} (KERAS_BACKEND={backend}). "
                        "Install TensorFlow and set KERAS_BACKEND=tensorflow for it; embedding and Keras models "
                        "run on every backend.")


def require_training_backend(what):
    """Raises `UserError` unless Keras runs on a backend bilm trains on (`BACKENDS`: TensorFlow, JAX, PyTorch):
    `what` (e.g. "the quick start") trains, or evaluates a training run."""
    backend = configured_backend()
    if backend not in BACKENDS:
        raise UserError(f"{what} runs on TensorFlow, JAX or PyTorch, where bilm trains, and Keras runs on {backend} "
                        f"(KERAS_BACKEND={backend}). Set KERAS_BACKEND to tensorflow, jax or torch for it.")
