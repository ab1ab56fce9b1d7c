"""The optimizers of `bilm.optimizers` on JAX arrays: each one's rule (`Optimizer.values_update`, written once
for every backend) applied to dense tensors, and row-sparse updates of a table whose gradient is a set of
rows (the softmax's, lazy for Adam), as TensorFlow's `Optimizer.update` applies it to variables.

Every function is pure: it takes the parameters, the optimizer's state and
the gradients and returns the new parameters and state, for a step
compiled whole with `jax.jit`. `scale` (a float scalar >= 0) multiplies each
gradient first (the global-norm clipping); where it is 0 the step changes
nothing, even for non-finite gradients (a skipped step), as in
`bilm.optimizers`. No optimizer is named here: adding one to the registry
adds it on JAX.
"""
import jax.numpy as jnp

from bilm.optimizers import optimizer_class


def initial_state(name, parameters):
    """The state of optimizer `name` (of `bilm.optimizers.OPTIMIZERS`) for `parameters` (a dict of arrays):
    `{slot: {parameter name: array}}` for each of its `slot_starts` (Adagrad's `"accumulators"`, Adam's `"m"`
    and `"v"`), and `"iterations"` (int32 0) where it counts its steps."""
    optimizer = optimizer_class(name)
    state = {slot: {key: jnp.full_like(value, start) for key, value in parameters.items()}
             for slot, start in optimizer.slot_starts.items()}
    if optimizer.counts_steps:
        state["iterations"] = jnp.zeros((), jnp.int32)
    return state


def _scaled(gradient, scale):
    return jnp.where(scale > 0, gradient * scale, jnp.zeros_like(gradient))


def apply(name, learning_rate, parameters, state, dense, sparse, scale):
    """One step of optimizer `name`.

    Args:
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
        iterations = (state["iterations"] + taken.astype(jnp.int32)).astype(jnp.float32)
    for key, gradient in dense.items():
        step, slots = optimizer.values_update(_scaled(gradient, scale), {slot: state[slot][key] for slot in
                                                                          optimizer.slot_starts},
                                              learning_rate, taken, iterations)
        parameters[key] = parameters[key] - step
        for slot, value in slots.items():
            state[slot][key] = value
    for key, (rows, values) in sparse.items():
        gathered = {slot: state[slot][key].at[rows].get(mode="fill", fill_value=start)
                    for slot, start in optimizer.slot_starts.items()}
        step, slots = optimizer.values_update(_scaled(values, scale), gathered, learning_rate, taken, iterations)
        for slot, value in slots.items():
            state[slot][key] = state[slot][key].at[rows].set(value, mode="drop")
        parameters[key] = parameters[key].at[rows].add(-step, mode="drop")
    if optimizer.counts_steps:
        state["iterations"] = state["iterations"] + taken.astype(jnp.int32)
    return parameters, state


def distinct_rows(rows, values, n_rows):
    """`(distinct rows, their summed values)` of a row-sparse gradient, with the shapes of `rows` (for jit):
    the distinct rows ascending, then `n_rows` (no row) in the slots left over, whose values are zeros."""
    distinct, index = jnp.unique(rows, return_inverse=True, size=rows.shape[0], fill_value=n_rows)
    summed = jnp.zeros((rows.shape[0],) + values.shape[1:], values.dtype).at[index.reshape(-1)].add(values)
    return distinct, summed
