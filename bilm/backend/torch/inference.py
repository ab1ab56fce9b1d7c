"""A network's inference call on PyTorch: its eager call under `torch.no_grad()`, layer by layer
(`bilm.backend.direct_call`)."""
import keras
import torch

from bilm.backend.direct_call import direct_call


def inference_call(network, tensorflow_signature=None, then=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)`, then `then` of them
    (`bilm.models.network_calls`); the signature is TensorFlow's alone."""

    def run_eagerly(inputs):
        # Keras on PyTorch takes no mix of NumPy arrays and tensors in one call.
        inputs = {key: keras.ops.convert_to_tensor(value) for key, value in inputs.items()}
        with torch.no_grad():
            outputs = direct_call(network, inputs, training=False)
            return outputs if then is None else then(outputs)

    return run_eagerly


def cut_padding(value, index):
    """`value[index]` (PyTorch pads nothing: `padded_length`)."""
    return value[index]


def padded_batch_size(n):
    """The rows a stateless call of `n` sentences is padded to: `n` (PyTorch runs eagerly, compiling nothing per
    shape)."""
    return n


def padded_length(n):
    """The time steps a call of `n` steps is padded to: `n` (PyTorch runs eagerly, compiling nothing per shape)."""
    return n
