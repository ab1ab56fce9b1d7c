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


def inference_call(network, tensorflow_signature=None, then=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)`, or for `then` of its outputs.

    Args:
        network: a Keras model taking a dict of tensors.
        tensorflow_signature: on TensorFlow, a function returning the
            `tf.function`'s input signature (one dict of `tf.TensorSpec`), or
            None for one trace per input shape.
        then: None, or a function of the network's output dict (in
            `keras.ops`), run in the same compiled call: on JAX its ops are
            then part of the program compiled for the input's shape, not
            compiled one by one for the shape of each result they see.

    Returns:
        a function of a dict of NumPy arrays or tensors, giving the
        network's outputs, or `then`'s (tensors of the backend).
    """
    return backend_module("inference").inference_call(network, tensorflow_signature, then)


def padded_ids(ids, length=None):
    """`ids` (int `(batch, time, ...)`) with zero ids (padding, which the network masks) appended along time
    up to the length its backend compiles for (`padded_length`: JAX's few shapes; the same `ids` elsewhere), or
    up to `length` where given and at least `time`. The real positions' outputs and each row's final LSTM
    states are those of `ids`."""
    time = ids.shape[1]
    padded = backend_module("inference").padded_length(time) if length is None or length < time else length
    if padded == time:
        return ids
    return np.pad(ids, [(0, 0), (0, padded - time)] + [(0, 0)] * (ids.ndim - 2))


def padded_batch(ids):
    """`ids` (int `(batch, ...)`) with rows of zero ids (empty sentences) appended up to the batch size its
    backend compiles for (`padded_batch_size`: JAX's few sizes; the same `ids` elsewhere). For stateless calls:
    a row's outputs do not depend on the others (to round-off; bilm's TensorFlow kernels to the bit)."""
    rows = backend_module("inference").padded_batch_size(len(ids))
    return ids if rows == len(ids) else np.pad(ids, [(0, rows - len(ids))] + [(0, 0)] * (ids.ndim - 1))


def unpadded_elmo_outputs(outputs, batch, time):
    """`elmo_outputs`' dict of a call whose ids were padded (`padded_batch`, `padded_ids`), cut to its `batch`
    rows and `time` steps (boundaries included), by the backend's `cut_padding` (on JAX, on the host: a slice on
    the device would compile a program for each shape)."""
    if tuple(outputs["token_embeddings"].shape[:2]) == (batch, time):
        return outputs
    inner = max(time - 2, 0)
    cuts = {"token_embeddings": np.s_[:batch, :time], "mask": np.s_[:batch, :inner],
            "lm_embeddings": np.s_[:batch, :, :inner], "lengths": np.s_[:batch]}
    cut_padding = backend_module("inference").cut_padding
    return {key: cut_padding(value, cuts[key]) for key, value in outputs.items()}


def to_numpy(tensor):
    """A backend's tensor (or a NumPy array) as a NumPy array."""
    return keras.ops.convert_to_numpy(tensor)
