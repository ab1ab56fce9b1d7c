"""A network's inference call on TensorFlow: a `tf.function` (a graph, not XLA) over the given signature."""
import tensorflow as tf


def inference_call(network, tensorflow_signature=None, then=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)`, then `then` of them in the same graph
    (`bilm.models.network_calls`); `tensorflow_signature` returns the `tf.function`'s input signature (None: one
    trace per input shape)."""
    signature = None if tensorflow_signature is None else [tensorflow_signature()]

    def run(inputs):
        outputs = network(inputs, training=False)
        return outputs if then is None else then(outputs)

    return tf.function(run, input_signature=signature, autograph=False)


def cut_padding(value, index):
    """`value[index]` (TensorFlow pads nothing: `padded_length`)."""
    return value[index]


def padded_batch_size(n):
    """The rows a stateless call of `n` sentences is padded to: `n` (one graph serves every batch size)."""
    return n


def padded_length(n):
    """The time steps a call of `n` steps is padded to: `n` (one graph serves every length)."""
    return n
