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
    """Raises `UserError` unless Keras runs on TensorFlow or JAX, the backends bilm trains on: `what` (e.g. "the
    quick start") trains."""
    backend = configured_backend()
    if backend not in ("tensorflow", "jax"):
        raise UserError(f"{what} trains on TensorFlow or JAX, and Keras runs on {backend} "
                        f"(KERAS_BACKEND={backend}). Set KERAS_BACKEND=jax or KERAS_BACKEND=tensorflow for it; "
                        "embedding and Keras models run on every backend.")
