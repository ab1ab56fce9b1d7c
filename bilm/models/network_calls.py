"""A Keras network's inference call, compiled as its backend compiles: the one place the front ends
(`BidirectionalLanguageModel`, the boundary state) turn a network into a fast function.

- TensorFlow: a `tf.function` (graph, not XLA) over the given signature;
- JAX: `jax.jit` of the network's `stateless_call`, reading the variables'
  current values at every call (a trace per input shape);
- PyTorch: the network's eager call under `torch.no_grad()`.
"""
import keras

from bilm.utils.backend import configured_backend


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
    backend = configured_backend()
    if backend == "tensorflow":
        import tensorflow as tf

        signature = None if tensorflow_signature is None else [tensorflow_signature()]
        return tf.function(lambda inputs: network(inputs, training=False), input_signature=signature,
                           autograph=False)
    if backend == "jax":
        import jax

        @jax.jit
        def run(trainable, non_trainable, inputs):
            outputs, _ = network.stateless_call(trainable, non_trainable, inputs, training=False)
            return outputs

        return lambda inputs: run([v.value for v in network.trainable_variables],
                                  [v.value for v in network.non_trainable_variables], inputs)
    if backend == "torch":
        import torch

        def run_eagerly(inputs):
            # Keras on PyTorch takes no mix of NumPy arrays and tensors in one call.
            inputs = {key: keras.ops.convert_to_tensor(value) for key, value in inputs.items()}
            with torch.no_grad():
                return network(inputs, training=False)

        return run_eagerly
    return lambda inputs: network(inputs, training=False)


def to_numpy(tensor):
    """A backend's tensor (or a NumPy array) as a NumPy array."""
    return keras.ops.convert_to_numpy(tensor)
