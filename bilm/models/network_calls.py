"""A Keras network's inference call, compiled as its backend compiles (`bilm.backend.<name>.inference`): the one
place the front ends (`BidirectionalLanguageModel`, the boundary state) turn a network into a fast function.

- TensorFlow: a `tf.function` (graph, not XLA) over the given signature;
- JAX: `jax.jit` of the network's `stateless_call`, reading the variables'
  current values at every call (a trace per input shape);
- PyTorch: the network's eager call under `torch.no_grad()`.
"""
import keras
import numpy as np

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


def padded_ids(ids):
    """`ids` (int `(batch, time, ...)`) with zero ids (padding, which the network masks) appended along time
    up to the length its backend compiles for (`padded_length`: JAX's few shapes; the same `ids` elsewhere).
    The real positions' outputs and each row's final LSTM states are those of `ids`."""
    time = ids.shape[1]
    padded = backend_module("inference").padded_length(time)
    if padded == time:
        return ids
    return np.pad(ids, [(0, 0), (0, padded - time)] + [(0, 0)] * (ids.ndim - 2))


def to_numpy(tensor):
    """A backend's tensor (or a NumPy array) as a NumPy array."""
    return keras.ops.convert_to_numpy(tensor)
