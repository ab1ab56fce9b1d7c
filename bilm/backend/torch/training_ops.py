"""What a training step does its own way on PyTorch, behind the names every backend's `training_ops` exports
(`bilm.backend.training_ops`): the gradient (torch autograd), steps run eagerly (inference under
`torch.no_grad`), rows of a table read and written in place, the sampler, TensorFlow's random numbers, and the
device a step runs on (Keras's: the GPU where PyTorch sees one).
"""
import contextlib
import functools

import keras
import torch

from bilm.backend.one_process import OneProcess, refuse_strategy
from bilm.backend.torch import random  # noqa: F401 (one of the shared names)
from bilm.backend.torch.sampler import log_uniform_candidates  # noqa: F401 (one of the shared names)
from bilm.errors import UserError

# Row indices: the step's ids and rows.
INDEX_DTYPE = "int64"

# Whether a signal may raise inside this backend's calls (a phase's work dropped at once): on PyTorch it is raised
# between its eager ops.
INTERRUPTIBLE_CALLS = True

# What the training key jit_compile asks for that this backend does not do: {value: the warning}.
JIT_COMPILE_NOTES = {True: "The training key jit_compile is true, and PyTorch runs every training step eagerly "
                           "(TensorFlow's and JAX's steps are compiled with XLA); on PyTorch it has no effect."}


def compile_step(step, jit_compile=False, placement=None):
    """`step(state, batch, step_number) -> (state, metrics)`, run eagerly on its `placement`'s device: the step's
    new state is written into `state`'s tensors (a table's rows in place, the rest copied in), which it returns:
    a network's weights held in the state (`hold_in`) stay the network's. The training key `jit_compile` aside:
    `JIT_COMPILE_NOTES`."""

    @functools.wraps(step)
    def run(state, batch, step_number):
        new_state, metrics = step(state, batch, step_number)
        with torch.no_grad():
            for tensor, value in zip(keras.tree.flatten(state), keras.tree.flatten(new_state), strict=True):
                if value is not tensor:
                    tensor.copy_(value)
        return state, metrics

    return run


def distinct_tokens_bound(char_ids, devices, widest_filter=None):
    """None: PyTorch's eager steps find each batch's distinct tokens themselves (`torch.unique`), no bound asked."""
    return None


def distinct_tokens_at_most(bound):
    """Nothing to set (`distinct_tokens_bound`)."""
    return contextlib.nullcontext()


def compile_inference(function):
    """`function` run without recording a graph for gradients."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        with torch.no_grad():
            return function(*args, **kwargs)

    return run


def gradients(loss, arguments):
    """`(gradients, aux)` of `loss(*arguments) -> (scalar, aux)`: `gradients` a tuple, one tree of the
    shapes of each argument (zeros where the loss does not depend on it); `aux` holds no graph."""
    leaves = [leaf.detach().requires_grad_(True) for leaf in keras.tree.flatten(arguments)]
    value, aux = loss(*keras.tree.pack_sequence_as(arguments, leaves))
    found = torch.autograd.grad(value, leaves, allow_unused=True)
    grads = [torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, found)]
    aux = keras.tree.map_structure(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, aux)
    return tuple(keras.tree.pack_sequence_as(arguments, grads)), aux


def take_rows(table, ids):
    """`table[ids]` (every id a row of `table`): indexing, differentiated into the rows' gradients."""
    return table[ids]


def unique_rows(rows, n_rows):
    """The distinct ids of int `rows` `(n,)` ascending, then `n_rows` (no row) up to `n` entries."""
    distinct = torch.unique(rows)
    return torch.cat([distinct, distinct.new_full((rows.shape[0] - len(distinct),), n_rows)])


def distinct_rows(rows, values, n_rows):
    """`(distinct rows, their summed values)` of a row-sparse gradient, each with `rows`' length: the distinct
    rows ascending, then `n_rows` (no row), whose values are zeros."""
    distinct, index = torch.unique(rows, return_inverse=True)
    summed = values.new_zeros((rows.shape[0],) + tuple(values.shape[1:])).index_add_(0, index.reshape(-1), values)
    return torch.cat([distinct, distinct.new_full((rows.shape[0] - len(distinct),), n_rows)]), summed


def gather_rows(table, rows, fill):
    """`table[rows]`, `fill` where a row is past the table's end."""
    inside = rows < table.shape[0]
    values = table[torch.where(inside, rows, torch.zeros_like(rows))]
    mask = inside.reshape((-1,) + (1,) * (values.dim() - 1))
    return torch.where(mask, values, torch.full_like(values, fill))


def set_rows(table, rows, values):
    """`table` with `table[rows] = values`, set in place; rows past the end are dropped."""
    inside = rows < table.shape[0]
    table[rows[inside]] = values[inside].to(table.dtype)
    return table


def add_rows(table, rows, values):
    """`table` with `values` added at `rows`, in place; rows past the end are dropped."""
    inside = rows < table.shape[0]
    return table.index_add_(0, rows[inside], values[inside].to(table.dtype))



def copy(value):
    """A new tensor of `value` (a Keras variable's value, a tensor or a NumPy array)."""
    return torch.clone(keras.ops.convert_to_tensor(value)).detach()


def hold_in(variables, values=None):
    """The state's arrays of a network's Keras `variables`, holding `values` (arrays of their shapes; None: their
    own values): the variables' own tensors (detached: no gradient recorded), `values` written into them. The
    step writes its new state into its state's tensors (`compile_step`), so the weights are held once."""
    held = [variable.value.detach() for variable in variables]
    if values is not None:
        for tensor, value in zip(held, values, strict=True):
            # Skipped where `value` is the variable's own memory already (a restore wrote it there).
            if not (isinstance(value, torch.Tensor) and value.data_ptr() == tensor.data_ptr()):
                write_into(tensor, value)
    return held


def write_into(array, value):
    """The state's `array` holding `value` (an array of its shape and dtype), returned: the tensor written in
    place, so that a restore holds the state once, not twice."""
    with torch.no_grad():
        array.copy_(torch.as_tensor(value, device=array.device))
    return array


class Placement(OneProcess):
    """Where a step's tensors live: Keras's device (PyTorch trains on one device).

    Args:
        devices: None, or a list of one device (`training_devices`).
    """

    def __init__(self, devices=None):
        self.devices = list(devices) if devices else training_devices(0)
        self.n_replicas = 1

    def _to(self, tree):
        device = self.devices[0]
        return keras.tree.map_structure(lambda x: torch.as_tensor(x).to(device), tree)

    rows = replicated = first = _to


def training_devices(n_gpus):
    """The device a run trains on (PyTorch trains on one: `n_gpus` above 1 is refused in one line)."""
    if (n_gpus or 0) > 1:
        raise UserError(f"n_gpus is {n_gpus}, and training on PyTorch uses one device; set n_gpus to 1, or train on "
                        "several GPUs with KERAS_BACKEND=jax or tensorflow.")
    return [keras.ops.zeros(()).device]  # Keras's own choice (CUDA, Apple's MPS or the CPU), not guessed again


def training_placement(n_gpus, strategy=None):
    """The `Placement` a run trains on: `training_devices(n_gpus)`; a `strategy` (TensorFlow's) is refused in one
    line."""
    refuse_strategy(strategy, "PyTorch")
    return Placement(training_devices(n_gpus))
