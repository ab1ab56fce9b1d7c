"""The control flow that Keras's backends shape each their own way: here `keras.ops.scan` takes outputs of any
shape, so a step's outputs are only what it outputs."""
from keras import ops


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`."""
    del output_width  # outputs of any shape
    return ops.scan(step, initial, xs)
