"""The optimizers of `bilm.optimizers` on a state of arrays (JAX's, PyTorch's): each one's rule
(`Optimizer.values_update`, written once for every backend) applied to dense tensors, and row-sparse updates
of a table whose gradient is a set of rows (the softmax's, lazy for Adam), as TensorFlow's `Optimizer.update`
applies it to variables.

Each function takes the parameters, the optimizer's state and the
gradients and returns the new parameters and state (pure on JAX, for a step
compiled whole with `jax.jit`; PyTorch's rows are written in place, the
state being consumed). `scale` (a float scalar >= 0) multiplies each
gradient first (the global-norm clipping); where it is 0 the step changes
nothing, even for non-finite gradients (a skipped step), as in
`bilm.optimizers`. No optimizer is named here: adding one to the registry
adds it on JAX.
"""
import numpy as np
from keras import ops

from bilm.optimizers import optimizer_class


def initial_state(name, parameters, to_tensor=ops.convert_to_tensor):
    """The state of optimizer `name` (of `bilm.optimizers.OPTIMIZERS`) for `parameters` (a dict of float32
    arrays): `{slot: {parameter name: array}}` for each of its `slot_starts` (Adagrad's `"accumulators"`, Adam's
    `"m"` and `"v"`), and `"iterations"` (int32 0) where it counts its steps. The values are made in NumPy and
    made tensors by `to_tensor` (the backend's `training_ops.copy`, with no op a shape on JAX)."""
    optimizer = optimizer_class(name)
    state = {slot: {key: to_tensor(np.full(tuple(value.shape), start, np.float32)) for key, value in parameters.items()}
             for slot, start in optimizer.slot_starts.items()}
    if optimizer.counts_steps:
        state["iterations"] = to_tensor(np.zeros((), np.int32))
    return state


def _scaled(gradient, scale):
    return ops.where(scale > 0, gradient * scale, ops.zeros_like(gradient))


def apply(backend, name, learning_rate, parameters, state, dense, sparse, scale):
    """One step of optimizer `name`.

    Args:
        backend: the backend's `training_ops` (`bilm.backend.training_ops()`):
            rows read and written.
        parameters: `{name: array}`.
        state: `initial_state(name, parameters)` or a later one.
        dense: `{name: gradient}` of the parameters updated whole.
        sparse: `{name: (rows, values)}` of the parameters updated by rows:
            int `rows` `(n,)`, distinct, where a row equal to the
            parameter's length stands for no row (skipped), and `values`
            `(n, ...)` their gradients.
        scale: float scalar, multiplies every gradient (0: no change).

    Returns:
        `(parameters, state)`, new.
    """
    optimizer = optimizer_class(name)
    parameters, state = dict(parameters), {k: dict(v) if isinstance(v, dict) else v for k, v in state.items()}
    taken = scale > 0
    iterations = None
    if optimizer.counts_steps:
        iterations = ops.cast(state["iterations"] + ops.cast(taken, "int32"), "float32")
    for key, gradient in dense.items():
        step, slots = optimizer.values_update(_scaled(gradient, scale), {slot: state[slot][key] for slot in
                                                                          optimizer.slot_starts},
                                              learning_rate, taken, iterations)
        parameters[key] = parameters[key] - step
        for slot, value in slots.items():
            state[slot][key] = value
    for key, (rows, values) in sparse.items():
        gathered = {slot: backend.gather_rows(state[slot][key], rows, start)
                    for slot, start in optimizer.slot_starts.items()}
        step, slots = optimizer.values_update(_scaled(values, scale), gathered, learning_rate, taken, iterations)
        for slot, value in slots.items():
            state[slot][key] = backend.set_rows(state[slot][key], rows, value)
        parameters[key] = backend.add_rows(parameters[key], rows, -step)
    if optimizer.counts_steps:
        state["iterations"] = state["iterations"] + ops.cast(taken, "int32")
    return parameters, state

