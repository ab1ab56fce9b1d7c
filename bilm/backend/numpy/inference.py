"""A network's inference call on Keras's NumPy backend: the network's own call."""


def inference_call(network, tensorflow_signature=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)` (`bilm.models.network_calls`)."""
    return lambda inputs: network(inputs, training=False)


def padded_length(n):
    """The time steps a call of `n` steps is padded to: `n` (NumPy runs eagerly, compiling nothing per shape)."""
    return n
