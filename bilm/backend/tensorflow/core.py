"""The control flow that Keras's backends shape each their own way: on TensorFlow, `keras.ops.scan` wants every
output shaped as the carry."""
from keras import ops


def scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`:
    `(final carry, outputs (time, batch, output_width))`. Each output rides at the end of a carry-shaped row."""
    def padded_step(state, step_inputs):
        state, output = step(state, step_inputs)
        return state, ops.concatenate([ops.zeros_like(state[:, :-output_width]), output], axis=-1)

    final, padded = ops.scan(padded_step, initial, xs)
    return final, padded[..., -output_width:]
