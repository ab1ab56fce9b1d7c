"""The control flow that Keras's backends shape each their own way: here `keras.ops.scan` takes outputs of any
shape, so a step's outputs are only what it outputs; the LSTM's recurrence is the portable one on that scan, with
a hand-written backward pass (`lstm_bptt`)."""
from keras import ops

from bilm.backend.jax.lstm_bptt import lstm_steps_bptt


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`."""
    del output_width  # outputs of any shape
    return ops.scan(step, initial, xs)


def lstm_steps(*args, gate_index=None):
    """`bilm.ops.lstm_scan.lstm_steps` on this backend's `scan`: its values, and its gradients to float32
    round-off from one product per kernel after the backward loop (`lstm_bptt`); rows picked by `gate_index`
    are taken first (XLA fuses the take)."""
    gates_tm, *rest = args
    if gate_index is not None:
        gates_tm = ops.take(gates_tm, gate_index, axis=0)
    return lstm_steps_bptt(gates_tm, *rest, scan=scan)
