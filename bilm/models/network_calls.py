"""A Keras network's inference call, compiled as its backend compiles (`bilm.backend.<name>.inference`): the one
place the front ends (`BidirectionalLanguageModel`, the boundary state) turn a network into a fast function.

- TensorFlow: a `tf.function` (graph, not XLA) over the given signature;
- JAX: `jax.jit` of the network's `stateless_call`, reading the variables'
  current values at every call (a trace per input shape);
- PyTorch: the network's eager call under `torch.no_grad()`.
"""
import keras

from bilm.backend import backend_module


def inference_call(network, tensorflow_signature=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)`.

    Args:
        network: a Keras model taking a dict of tensors.
        tensorflow_signature: on TensorFlow, a function returning the
            `tf.function`'s input signature (one dict of `tf.TensorSpec`), or
            None for one trace per input shape.

    Returns:
        a function of a dict of NumPy arrays or tensors, giving the
        network's outputs (tensors of the backend).
    """
    return backend_module("inference").inference_call(network, tensorflow_signature)


def to_numpy(tensor):
    """A backend's tensor (or a NumPy array) as a NumPy array."""
    return keras.ops.convert_to_numpy(tensor)
