"""The character CNN token encoder: char embedding, convolutions, max-pool."""
import keras
from keras import ops

from bilm.backend import fast_layer_call
from bilm.errors import UserError
from bilm.layers.initializers import Filled, char_cnn_kernel_initializer, host_values, uniform
from bilm.ops.char_convolutions_portable import portable_char_convolutions

# At inference (`training=False`) a call encoding at most this many tokens
# (a sentence's new words) runs the table loop's sums without compiling
# the loop (`bilm.ops.char_convolutions`, `direct_up_to`): the same bytes,
# without a compilation for each new column count (bench/bench_latency.py).
DIRECT_CONVOLUTION_TOKENS = 32

@keras.saving.register_keras_serializable(package="bilm")
class CharCNNEncoder(keras.layers.Layer):
    """Encodes each token from its character ids with a bank of 1-D CNNs.

    For every filter `(width, num)`: a valid convolution over the character
    positions, max over all positions (padding included), then the
    activation (max-pool *before* activation, as the original code does).
    The filter outputs are concatenated into `n_filters = sum(num)` features.

    Args:
        n_characters: rows of the character embedding table (262 for
            prediction, where id 0 is batch padding; 261 for training).
        embedding_dim: size of a character embedding.
        filters: sequence of `(width, num_filters)` pairs.
        activation: `"relu"` or `"tanh"`.
        kernel_initializer: None for the original's initialization, or a
            Keras initializer for the character table and every kernel
            (`"zeros"` for a layer whose weights are about to be loaded:
            nothing is drawn at random).

    Call arguments:
        char_ids: int tensor `(batch, time, max_characters_per_token)`.
        training: with False, a call of at most `DIRECT_CONVOLUTION_TOKENS`
            tokens runs plain convolutions (see
            `bilm.ops.char_convolutions`); otherwise the compiled table
            loop with its reproducible gradient. Both agree to float32
            round-off.

    Returns:
        float tensor `(batch, time, n_filters)`.
    """

    def __init__(self, n_characters, embedding_dim, filters, activation="relu", kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        if activation not in ("relu", "tanh"):
            raise UserError(f"activation must be 'relu' or 'tanh'. Received: activation={activation!r}")
        self.n_characters = n_characters
        self.embedding_dim = embedding_dim
        self.filters = [tuple(f) for f in filters]
        self.activation = activation
        self.n_filters = sum(num for _, num in self.filters)
        self.kernel_initializer = None if kernel_initializer is None else keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        self.char_embedding = self.add_weight(
            name="char_embedding",
            shape=(self.n_characters, self.embedding_dim),
            initializer=host_values(self.kernel_initializer or uniform(1.0)),
        )
        self.kernels, self.biases = [], []
        for i, (width, num) in enumerate(self.filters):
            self.kernels.append(self.add_weight(
                name=f"kernel_{i}",
                shape=(width, self.embedding_dim, num),
                initializer=host_values(self.kernel_initializer
                                        or char_cnn_kernel_initializer(self.activation, width, self.embedding_dim)),
            ))
            self.biases.append(self.add_weight(name=f"bias_{i}", shape=(num,), initializer=Filled(0.0)))

    def call(self, char_ids, training=None):
        char_ids = ops.cast(char_ids, "int32")
        shape = ops.shape(char_ids)
        flat_ids = ops.reshape(char_ids, (-1, shape[2]))
        fast_call = fast_layer_call("char_cnn")
        if fast_call is not None:
            features = fast_call(self, flat_ids, DIRECT_CONVOLUTION_TOKENS if training is False else 0)
        else:
            features = self.portable_features(flat_ids)
        return ops.reshape(features, (shape[0], shape[1], self.n_filters))

    def portable_features(self, flat_ids, convolutions=portable_char_convolutions):
        """`(n, n_filters)` features of int `(n, width)` char ids in `keras.ops` (the backends' reference);
        `convolutions`: a function of `portable_char_convolutions`'s arguments and results (a backend's own)."""
        pooled = convolutions(flat_ids, self.char_embedding, list(self.kernels))
        return self._activation(pooled + ops.concatenate(list(self.biases), axis=0))

    def _activation(self, x):
        return ops.relu(x) if self.activation == "relu" else ops.tanh(x)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], self.n_filters)

    def get_config(self):
        config = super().get_config()
        config.update({
            "n_characters": self.n_characters,
            "embedding_dim": self.embedding_dim,
            "filters": [list(f) for f in self.filters],
            "activation": self.activation,
            "kernel_initializer": (None if self.kernel_initializer is None
                                   else keras.initializers.serialize(self.kernel_initializer)),
        })
        return config
