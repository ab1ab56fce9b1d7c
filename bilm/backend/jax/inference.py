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
