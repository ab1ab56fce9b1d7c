"""A network's inference call on JAX: `jax.jit` of its `stateless_call`, reading the variables' current values
at every call (a trace per input shape)."""
import jax


def inference_call(network, tensorflow_signature=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)` (`bilm.models.network_calls`); the
    signature is TensorFlow's alone."""

    @jax.jit
    def run(trainable, non_trainable, inputs):
        outputs, _ = network.stateless_call(trainable, non_trainable, inputs, training=False)
        return outputs

    return lambda inputs: run([v.value for v in network.trainable_variables],
                              [v.value for v in network.non_trainable_variables], inputs)


def padded_length(n):
    """The time steps a call of `n` steps is padded to (zero ids, which the network masks): JAX compiles one
    program per input shape, so lengths share a few shapes, two a doubling (8 and below, 12, 16, 24, 32,
    48, ...), at most half again the steps."""
    if n <= 8:
        return 8
    octave = 1 << (n - 1).bit_length() - 1  # the power of two below n
    return octave * 3 // 2 if n <= octave * 3 // 2 else 2 * octave
