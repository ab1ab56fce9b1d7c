"""A network's inference call on TensorFlow: a `tf.function` (a graph, not XLA) over the given signature."""
import tensorflow as tf


def inference_call(network, tensorflow_signature=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)` (`bilm.models.network_calls`);
    `tensorflow_signature` returns the `tf.function`'s input signature (None: one trace per input shape)."""
    signature = None if tensorflow_signature is None else [tensorflow_signature()]
    return tf.function(lambda inputs: network(inputs, training=False), input_signature=signature, autograph=False)


def padded_length(n):
    """The time steps a call of `n` steps is padded to: `n` (one graph serves every length)."""
    return n
