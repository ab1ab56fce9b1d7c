"""What a training step does its own way on JAX, behind the names every backend's `training_ops` exports
(`bilm.backend.training_ops`): the gradient (`jax.grad`), the compiled step (`jax.jit`, the state's buffers
donated), rows of a table read and written with fixed shapes, the sampler, TensorFlow's random numbers, and
the devices a step runs on (the batch split along them, the weights replicated).
"""

import jax
import jax.numpy as jnp
import numpy as np

from bilm.backend.jax import random  # noqa: F401 (one of the shared names)
from bilm.backend.jax.layer_calls import distinct_tokens_at_most, distinct_tokens_bound  # noqa: F401 (shared names)
from bilm.backend.jax.sampler import log_uniform_candidates  # noqa: F401 (one of the shared names)
from bilm.backend.one_process import OneProcess, refuse_strategy
from bilm.errors import UserError

# Row indices: the step's ids and rows.
INDEX_DTYPE = "int32"

# Whether a signal may raise inside this backend's calls (a phase's work dropped at once): not on JAX, where an
# exception raised in the middle of an XLA compilation can crash the interpreter at its exit.
INTERRUPTIBLE_CALLS = False

# What the training key jit_compile asks for that this backend does not do: {value: the warning}.
JIT_COMPILE_NOTES = {False: "The training key jit_compile is false, and JAX compiles every training step whole with "
                            "XLA (only TensorFlow's steps run uncompiled); on JAX it has no effect."}


def compile_step(step, jit_compile=True, placement=None):
    """`step(state, batch, step_number) -> (state, metrics)` compiled whole, whatever its `placement`; `state`'s
    buffers are reused (the training key `jit_compile` aside: `JIT_COMPILE_NOTES`)."""
    return jax.jit(step, donate_argnums=0)


def compile_inference(function):
    """`function` compiled, for calls that compute no gradient."""
    return jax.jit(function)


def gradients(loss, arguments):
    """`(gradients, aux)` of `loss(*arguments) -> (scalar, aux)`: `gradients` a tuple, one tree of the
    shapes of each argument."""
    return jax.grad(loss, argnums=tuple(range(len(arguments))), has_aux=True)(*arguments)


def take_rows(table, ids):
    """`table[ids]` (every id a row of `table`): indexing, differentiated into the rows' gradients."""
    return table[ids]


def unique_rows(rows, n_rows):
    """The distinct ids of int `rows` `(n,)` ascending, then `n_rows` (no row) up to `n` entries."""
    return jnp.unique(rows, size=rows.shape[0], fill_value=n_rows)


def distinct_rows(rows, values, n_rows):
    """`(distinct rows, their summed values)` of a row-sparse gradient, each with `rows`' length: the distinct
    rows ascending, then `n_rows` (no row), whose values are zeros."""
    distinct, index = jnp.unique(rows, return_inverse=True, size=rows.shape[0], fill_value=n_rows)
    summed = jnp.zeros((rows.shape[0],) + values.shape[1:], values.dtype).at[index.reshape(-1)].add(values)
    return distinct, summed


def gather_rows(table, rows, fill):
    """`table[rows]`, `fill` where a row is past the table's end."""
    return table.at[rows].get(mode="fill", fill_value=fill)


def set_rows(table, rows, values):
    """`table` with `table[rows] = values`; rows past the end are dropped. `table` may be consumed."""
    return table.at[rows].set(values, mode="drop")


def add_rows(table, rows, values):
    """`table` with `values` added at `rows`; rows past the end are dropped. `table` may be consumed."""
    return table.at[rows].add(values, mode="drop")



def copy(value):
    """A new array of `value` (a Keras variable's value, an array or a NumPy array), on the default device. A
    transfer, not an op: `jnp.array` compiles a program for each new shape it copies."""
    return jax.device_put(value, may_alias=False)


def hold_in(variables, values=None):
    """The state's arrays of a network's Keras `variables`, holding `values` (arrays of their shapes; None: their
    own values): the variables' own arrays, `values` assigned to them first. The weights are held once: the
    step donates its state's buffers, after which the variables hold deleted arrays until weights are written
    into them again (`ArrayTrainStep.write_weights`, a restore, an adaptation)."""
    if values is not None:
        for variable, value in zip(variables, values, strict=True):
            variable.assign(value)
    return [variable.value for variable in variables]


def write_into(array, value):
    """A new array of `value` (a NumPy array of `array`'s shape and dtype), where `array` was: JAX's arrays are
    not written in place, so `array`'s buffer is freed once the copy is made (`array` is consumed: its shape and
    dtype stay, its values are gone), and a restored state is held once, as on the other backends."""
    written = copy(value)
    if isinstance(array, jax.Array) and not array.is_deleted():
        array.delete()
    return written


class Placement(OneProcess):
    """Where a step's tensors live: the batch and LSTM states split along `devices`, the rest replicated.

    Args:
        devices: JAX devices (None: the first one).
    """

    def __init__(self, devices=None):
        self.devices = list(devices) if devices else jax.devices()[:1]
        self.n_replicas = len(self.devices)
        mesh = jax.sharding.Mesh(np.array(self.devices), ("data",))
        self._rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        self._replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def rows(self, tree):
        """`tree`'s arrays split along their first axis."""
        return jax.device_put(tree, self._rows)

    def replicated(self, tree):
        """`tree`'s arrays on every device."""
        return jax.device_put(tree, self._replicated)

    def first(self, tree):
        """`tree`'s arrays on the first device."""
        return jax.device_put(tree, self.devices[0])


def training_devices(n_gpus):
    """The first `n_gpus` devices of JAX's default kind (the CPU where it has no accelerator)."""
    devices = jax.devices()
    n = n_gpus or 1
    if n > len(devices):
        raise UserError(f"--n_gpus {n} asks for more devices than JAX sees ({len(devices)}: "
                        f"{', '.join(str(d) for d in devices)}).")
    return devices[:n]


def training_placement(n_gpus, strategy=None):
    """The `Placement` a run trains on: `training_devices(n_gpus)`; a `strategy` (TensorFlow's) is refused in one
    line."""
    refuse_strategy(strategy, "JAX")
    return Placement(training_devices(n_gpus))
