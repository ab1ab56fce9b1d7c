"""What each Keras backend does its own way, behind one set of names (as Keras's `keras/src/backend/<name>/`).

`bilm.backend.<name>` (tensorflow, jax, torch, numpy) each export, in a
module of the same name: `inference.inference_call` (a network's compiled
inference call) and `devices` (`set_numerics`, `describe_devices`,
`missing_gpus_warning`); `backend_module` picks Keras's backend's module.

`bilm.backend.<name>.training_ops` (JAX, PyTorch) each export the same
names: `compile_step`, `compile_inference`, `gradients`, `unique_rows`,
`distinct_rows`, `gather_rows`, `set_rows`, `add_rows`,
`copy`, `Placement`, `training_devices`, `log_uniform_candidates`, `random`
(TensorFlow's stateless random numbers), `INDEX_DTYPE` and `JIT_COMPILE_NOTES`. The training step
written once in `keras.ops` (`bilm.training.jax.train_step`) calls them
through `training_ops()`, which picks the module of Keras's backend: the one
place that branches on the backend's name for training.
"""
import importlib

from bilm.errors import UserError
from bilm.utils.backend import configured_backend

# The backends whose training step is the array step (TensorFlow's is `bilm.training.run.train_step`).
ARRAY_TRAINING_BACKENDS = ("jax", "torch")


def backend_module(name):
    """The module `name` (`inference`, `devices`, `training_ops`) of Keras's backend's folder,
    `bilm.backend.<backend>.<name>`: the one place that picks what a backend does its own way."""
    return importlib.import_module(f"bilm.backend.{configured_backend()}.{name}")


def training_ops():
    """The `training_ops` module of Keras's backend (JAX or PyTorch); a `UserError` on another."""
    backend = configured_backend()
    if backend not in ARRAY_TRAINING_BACKENDS:
        raise UserError(f"The array training step runs on JAX or PyTorch, and Keras's backend is {backend}; set "
                        "KERAS_BACKEND=jax or torch (TensorFlow trains with bilm.training.train).")
    return backend_module("training_ops")
