"""A network's inference call on JAX: `jax.jit` of its `stateless_call`, reading the variables' current values
at every call (a trace per input shape), and the transposes of the kernels its layers read in columns
(`bilm.backend.jax.column_kernels`)."""
import jax
import numpy as np

from bilm.backend.direct_call import stateless_direct_call
from bilm.backend.jax.column_kernels import kernels_in_columns, network_column_kernels, transposed_values


def inference_call(network, tensorflow_signature=None, then=None):
    """`run(inputs) -> outputs` for `network(inputs, training=False)`, then `then` of them in the same program
    (`bilm.models.network_calls`); the signature is TensorFlow's alone."""

    from bilm.backend.jax.layer_calls import reads_transposes  # which imports this module

    kernels = network_column_kernels(network)

    @jax.jit
    def run(trainable, non_trainable, inputs, transposed):
        with kernels_in_columns(transposed):
            outputs = stateless_direct_call(network, trainable, non_trainable, inputs, training=False)
        return outputs if then is None else then(outputs)

    def call(inputs):
        # Only the transposes a call of these rows may read are made (an LSTM's are read by few calls).
        batches = {np.shape(x)[0] for x in jax.tree.leaves(inputs) if np.ndim(x)}
        read = [kernel for layer, kernel in kernels if reads_transposes(layer, batches)]
        return run([v.value for v in network.trainable_variables], [v.value for v in network.non_trainable_variables],
                   inputs, transposed_values(read))

    return call


def cut_padding(value, index):
    """`value[index]`, where `index` cuts off the padding `padded_length` added: made on the host and put back
    on the device, as a slice on the device would compile a program for each length (tens of milliseconds)."""
    return jax.device_put(np.asarray(value)[index])


def padded_batch_size(n):
    """The rows a stateless call of `n` sentences is padded to (empty sentences): one program serves several
    batch sizes, as `padded_length` lets it serve several lengths. 1, 2, 4 and 8, then `padded_length`'s values
    (12, 16, 24, 32, 48, ...): at most 1.6 times the rows, one sentence a call unpadded."""
    if n <= 2:
        return n
    return 4 if n <= 4 else padded_length(n)


def padded_length(n):
    """The time steps a call of `n` steps is padded to (zero ids, which the network masks): JAX compiles one
    program per input shape, so lengths share a few shapes, two a doubling (8 and below, 12, 16, 24, 32,
    48, ...), at most half again the steps."""
    if n <= 8:
        return 8
    octave = 1 << (n - 1).bit_length() - 1  # the power of two below n
    return octave * 3 // 2 if n <= octave * 3 // 2 else 2 * octave
