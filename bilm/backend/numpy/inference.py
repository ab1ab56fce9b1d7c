"""A network's inference call on Keras's NumPy backend: the network's own call, layer by layer
(`bilm.backend.direct_call`)."""
from bilm.backend.direct_call import direct_call


def inference_call(network, tensorflow_signature=None, then=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)`, then `then` of them
    (`bilm.models.network_calls`)."""
    if then is None:
        return lambda inputs: direct_call(network, inputs, training=False)
    return lambda inputs: then(direct_call(network, inputs, training=False))


def cut_padding(value, index):
    """`value[index]` (NumPy pads nothing: `padded_length`)."""
    return value[index]


def padded_batch_size(n):
    """The rows a stateless call of `n` sentences is padded to: `n` (NumPy runs eagerly, compiling nothing per
    shape)."""
    return n


def padded_length(n):
    """The time steps a call of `n` steps is padded to: `n` (NumPy runs eagerly, compiling nothing per shape)."""
    return n
