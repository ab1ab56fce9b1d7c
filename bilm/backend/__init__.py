"""What each Keras backend does its own way, behind one set of names (as Keras's `keras/src/backend/<name>/`).

`bilm.backend.<name>` (tensorflow, jax, torch, numpy) each export, in a
module of the same name: `inference.inference_call` (a network's compiled
inference call), `core.scan` (`keras.ops.scan` as the backend shapes it)
and `core.lstm_steps` (the LSTM's steps over time: the portable ones on
that scan, PyTorch's own loop of torch ops, bilm's native recurrence where
PyTorch or NumPy records no gradient, which reads the gates through
`gate_index` and adds `bias` in place), `devices` (`set_numerics`,
`describe_devices`, `missing_gpus_warning`), `layer_calls.FAST_CALLS` (the calls of its own: TensorFlow's fast paths and
its language model calls, PyTorch's and JAX's distinct tokens; `fast_layer_call`) and
`random` (TensorFlow's stateless random numbers: `seed_words`, `fold_in`,
`fold_in_int32`, `uniform`, `dropout`; NumPy's say in one line that it
draws none); `backend_module` picks Keras's backend's module.

`bilm.backend.<name>.training_ops` (TensorFlow, JAX, PyTorch) each export the same
names: `compile_step`, `compile_inference`, `gradients`, `take_rows`,
`distinct_tokens_bound`, `distinct_tokens_at_most`, `unique_rows`,
`distinct_rows`, `gather_rows`, `set_rows`, `add_rows`,
`copy`, `hold_in`, `Placement`, `training_placement`, `training_devices`, `log_uniform_candidates`, `random`
(TensorFlow's stateless random numbers), `INDEX_DTYPE`, `INTERRUPTIBLE_CALLS` and `JIT_COMPILE_NOTES`. The training step
written once in `keras.ops` (`bilm.training.arrays.train_step`) calls them
through `training_ops()`, which picks the module of Keras's backend: the one
place that branches on the backend's name for training. `trainer_module` picks the module whose `Trainer`
opens a run of the one training driver (`bilm.training.run.loop.run_training`).
"""
import importlib

from bilm.errors import UserError
from bilm.utils.backend import PORTABLE, configured_backend, require_training_backend

# The module that trains on each backend (its `Trainer` and `evaluate_checkpoint`), named, not imported.
TRAINERS = {name: "bilm.training.arrays.training_run" for name in ("tensorflow", "jax", "torch")}


# The Keras backends with a folder here (Keras's OpenVINO backend, for one, has none).
FOLDERS = ("tensorflow", "jax", "torch", "numpy")


def backend_module(name):
    """The module `name` (`inference`, `core`, `devices`, `layer_calls`, `random`, `training_ops`) of Keras's
    backend's folder, `bilm.backend.<backend>.<name>`: the one place that picks what a backend does its own way.
    A backend bilm has no folder for is one `UserError`."""
    backend = configured_backend()
    if backend not in FOLDERS:
        raise UserError(f"Keras runs on {backend} (KERAS_BACKEND={backend}), which bilm does not run on; set "
                        "KERAS_BACKEND to tensorflow, jax or torch (or numpy, to embed without training).")
    return importlib.import_module(f"bilm.backend.{backend}.{name}")


def fast_layer_call(name):
    """The backend's own call of layer `name` (its `layer_calls.FAST_CALLS`: TensorFlow's fast paths), or None
    where the layer runs its portable `keras.ops` code: on a backend without one, and in a thread that asked for
    the portable code (`bilm.utils.backend.PORTABLE`)."""
    if PORTABLE.is_on():
        return None
    return backend_module("layer_calls").FAST_CALLS.get(name)


def trainer_module():
    """The module that trains on Keras's backend (`TRAINERS`: the array step's on every one, its backend's parts
    `training_ops`); a `UserError` on a backend bilm does not train on."""
    require_training_backend("Training")
    return importlib.import_module(TRAINERS[configured_backend()])


def training_ops():
    """The `training_ops` module of Keras's backend (TensorFlow, JAX or PyTorch); a `UserError` on another."""
    require_training_backend("Training")  # a backend bilm does not train on: the line that says so
    return backend_module("training_ops")
