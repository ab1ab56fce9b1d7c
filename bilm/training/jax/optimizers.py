"""Adagrad and Adam on JAX arrays, as `bilm.optimizers` updates TensorFlow's variables: dense tensors, and
row-sparse updates of a table whose gradient is a set of rows (the softmax's, lazy for Adam).

Every function is pure: it takes the parameters, the optimizer's state and
the gradients and returns the new parameters and state, for a step
compiled whole with `jax.jit`. `scale` (a float scalar >= 0) multiplies each
gradient first (the global-norm clipping); where it is 0 the step changes
nothing, even for non-finite gradients (a skipped step), as in
`bilm.optimizers`.
"""
import jax.numpy as jnp

INITIAL_ACCUMULATOR_VALUE = 1.0  # Adagrad's, as TF1's AdagradOptimizer
ADAM_BETAS = (0.9, 0.999)
ADAM_EPSILON = 1e-7
OPTIMIZERS = ("adagrad", "adam")  # those of `bilm.optimizers`' registry, which names them and their default rates


def initial_state(name, parameters):
    """The state of optimizer `name` (`"adagrad"` or `"adam"`) for `parameters` (a dict of arrays):
    Adagrad `{"accumulators": ...}` (ones), Adam `{"m": ..., "v": ..., "iterations": int32 0}`."""
    if name == "adagrad":
        return {"accumulators": {k: jnp.full_like(p, INITIAL_ACCUMULATOR_VALUE) for k, p in parameters.items()}}
    if name == "adam":
        return {"m": {k: jnp.zeros_like(p) for k, p in parameters.items()},
                "v": {k: jnp.zeros_like(p) for k, p in parameters.items()},
                "iterations": jnp.zeros((), jnp.int32)}
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}. Received: {name!r}")


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
    parameters, state = dict(parameters), {k: dict(v) if isinstance(v, dict) else v for k, v in state.items()}
    taken = scale > 0
    if name == "adagrad":
        accumulators = state["accumulators"]
        for key, gradient in dense.items():
            gradient = _scaled(gradient, scale)
            accumulators[key] = accumulators[key] + gradient * gradient
            parameters[key] = parameters[key] - learning_rate * gradient / jnp.sqrt(accumulators[key])
        for key, (rows, values) in sparse.items():
            values = _scaled(values, scale)
            accumulated = accumulators[key].at[rows].get(mode="fill", fill_value=1.0) + values * values
            accumulators[key] = accumulators[key].at[rows].set(accumulated, mode="drop")
            step = learning_rate * values / jnp.sqrt(accumulated)
            parameters[key] = parameters[key].at[rows].add(-step, mode="drop")
        return parameters, state
    beta_1, beta_2 = ADAM_BETAS
    t = (state["iterations"] + taken.astype(jnp.int32)).astype(jnp.float32)
    step_size = learning_rate * jnp.sqrt(1.0 - beta_2 ** t) / (1.0 - beta_1 ** t)
    m, v = state["m"], state["v"]

    def moments(first, second, gradient):
        first = jnp.where(taken, beta_1 * first + (1 - beta_1) * gradient, first)
        second = jnp.where(taken, beta_2 * second + (1 - beta_2) * gradient * gradient, second)
        step = jnp.where(taken, step_size * first / (jnp.sqrt(second) + ADAM_EPSILON), jnp.zeros_like(first))
        return first, second, step

    for key, gradient in dense.items():
        m[key], v[key], step = moments(m[key], v[key], _scaled(gradient, scale))
        parameters[key] = parameters[key] - step
    for key, (rows, values) in sparse.items():
        first, second, step = moments(m[key].at[rows].get(mode="fill", fill_value=0.0),
                                      v[key].at[rows].get(mode="fill", fill_value=0.0), _scaled(values, scale))
        m[key] = m[key].at[rows].set(first, mode="drop")
        v[key] = v[key].at[rows].set(second, mode="drop")
        parameters[key] = parameters[key].at[rows].add(-step, mode="drop")
    state["iterations"] = state["iterations"] + taken.astype(jnp.int32)
    return parameters, state


def distinct_rows(rows, values, n_rows):
    """`(distinct rows, their summed values)` of a row-sparse gradient, with the shapes of `rows` (for jit):
    the distinct rows ascending, then `n_rows` (no row) in the slots left over, whose values are zeros."""
    distinct, index = jnp.unique(rows, return_inverse=True, size=rows.shape[0], fill_value=n_rows)
    summed = jnp.zeros((rows.shape[0],) + values.shape[1:], values.dtype).at[index.reshape(-1)].add(values)
    return distinct, summed
