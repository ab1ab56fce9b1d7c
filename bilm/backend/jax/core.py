"""The control flow that Keras's backends shape each their own way: here `keras.ops.scan` takes outputs of any
shape, so a step's outputs are only what it outputs; the LSTM's recurrence is the portable one on that scan, with
a hand-written backward pass (`lstm_bptt`)."""
import jax
import jax.numpy as jnp
from keras import ops

from bilm.backend.jax.lstm_bptt import lstm_steps_bptt
from bilm.ops.lstm_scan import gates_and_bias


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`."""
    del output_width  # outputs of any shape
    return ops.scan(step, initial, xs)


def lstm_steps(*args, gate_index=None, bias=None, steps_scan=scan):
    """`bilm.ops.lstm_scan.lstm_steps` on `steps_scan` (this backend's `scan`, or `scan_valid_steps`): its values,
    and its gradients to float32 round-off from one product per kernel after the backward loop (`lstm_bptt`); the
    bias added to the gates and the rows `gate_index` picks taken first (`gates_and_bias`: XLA fuses them)."""
    gates_tm, *rest = args
    return lstm_steps_bptt(gates_and_bias(gates_tm, gate_index, bias), *rest, scan=steps_scan)


def scan_valid_steps(step, initial, xs, output_width):
    """`scan` of the LSTM's steps, `xs` `(gates, valid)` with `valid` bool `(time, batch, 1)` (each row's first
    steps), run only up to the last step inside any row's length (`scan_up_to`): a call's padding steps are not
    run. For inference: under a gradient each step is a `lax.cond`."""
    del output_width  # outputs of any shape
    longest = jnp.sum(jnp.any(xs[1], axis=(1, 2)).astype(jnp.int32))
    return scan_up_to(step, initial, xs, longest)


def scan_up_to(step, initial, xs, count):
    """`jax.lax.scan(step, initial, xs)` for its first `count` steps (a traced int: the longest row's length), the
    outputs zeros after them: a batch's padding steps (`padded_length`'s, past every row's length, where each step
    would leave the state as it is and output zeros) are not run."""
    time = jax.tree_util.tree_leaves(xs)[0].shape[0]
    _, output = jax.eval_shape(step, initial, jax.tree_util.tree_map(lambda x: x[0], xs))

    def skipped(state, x):
        return state, jax.tree_util.tree_map(lambda spec: jnp.zeros(spec.shape, spec.dtype), output)

    def guarded(state, inputs):
        t, x = inputs
        return jax.lax.cond(t < count, step, skipped, state, x)

    return jax.lax.scan(guarded, initial, (jnp.arange(time), xs))
