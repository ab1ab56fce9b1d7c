"""The layers' calls of Keras's NumPy backend's own (`bilm.backend.fast_layer_call`): the char CNN by bilm's native
table lookups where the library is built (`bilm.ops.native.portable_kernels.char_max_pooled`); every other layer
runs its portable `keras.ops` code."""
import numpy as np
from keras import ops

from bilm.ops.native import portable_kernels


def char_cnn(layer, flat_ids, direct_up_to=0):
    """`CharCNNEncoder`'s features of `flat_ids` `(n, width)`: the convolutions by bilm's native table lookups where
    the library is built, else the portable code. The same values to float32 round-off (the NumPy backend
    computes no gradients)."""
    del direct_up_to  # TensorFlow's inference path
    if portable_kernels.load_library() is None:
        return layer.portable_features(flat_ids)
    return layer.portable_features(flat_ids, convolutions=native_char_convolutions)


def native_char_convolutions(char_ids, char_embedding, kernels):
    """`bilm.ops.char_convolutions_portable.portable_char_convolutions`'s arguments and values (to float32
    round-off), by `portable_kernels.char_max_pooled` on the arrays, the tables made a call (NumPy's arrays carry
    no version that would tell a kept table is still the weights')."""
    weights = [np.asarray(ops.convert_to_numpy(w), np.float32) for w in (char_embedding, *kernels)]
    return portable_kernels.char_max_pooled(np.asarray(char_ids), portable_kernels.char_tables(weights[0], weights[1:]))


FAST_CALLS = {"char_cnn": char_cnn}
