"""The control flow that Keras's backends shape each their own way: here `keras.ops.scan` takes outputs of any
shape, so a step's outputs are only what it outputs; the LSTM's recurrence is bilm's native one where it is built
(`bilm.ops.native.portable_kernels`), else the portable one on that scan."""
from keras import ops

from bilm.ops.lstm_scan import lstm_steps as portable_lstm_steps
from bilm.ops.native import portable_kernels


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`."""
    del output_width  # outputs of any shape
    return ops.scan(step, initial, xs)


def lstm_steps(*args, gate_index=None, bias=None):
    """`bilm.ops.lstm_scan.lstm_steps`: by `portable_kernels.steps_or_none` (its values to float32 round-off; the
    rows `gate_index` picks read in place, the bias added as each is read), else the portable steps on this
    backend's `scan`."""
    steps = portable_kernels.steps_or_none(*args, gate_index=gate_index, bias=bias)
    return portable_lstm_steps(*args, scan=scan, gate_index=gate_index, bias=bias) if steps is None else steps
