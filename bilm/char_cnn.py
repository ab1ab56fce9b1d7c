"""The character CNN token encoder: char embedding, convolutions, max-pool."""
import keras
import tensorflow as tf

from bilm.initializers import char_cnn_kernel_initializer


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

    Call arguments:
        char_ids: int tensor `(batch, time, max_characters_per_token)`.

    Returns:
        float tensor `(batch, time, n_filters)`.
    """

    def __init__(self, n_characters, embedding_dim, filters, activation="relu", **kwargs):
        super().__init__(**kwargs)
        if activation not in ("relu", "tanh"):
            raise ValueError(f"activation must be 'relu' or 'tanh'. Received: activation={activation!r}")
        self.n_characters = n_characters
        self.embedding_dim = embedding_dim
        self.filters = [tuple(f) for f in filters]
        self.activation = activation
        self.n_filters = sum(num for _, num in self.filters)

    def build(self, input_shape):
        self.char_embedding = self.add_weight(
            name="char_embedding",
            shape=(self.n_characters, self.embedding_dim),
            initializer=keras.initializers.RandomUniform(-1.0, 1.0),
        )
        self.kernels, self.biases = [], []
        for i, (width, num) in enumerate(self.filters):
            self.kernels.append(self.add_weight(
                name=f"kernel_{i}",
                shape=(width, self.embedding_dim, num),
                initializer=char_cnn_kernel_initializer(self.activation, width, self.embedding_dim),
            ))
            self.biases.append(self.add_weight(name=f"bias_{i}", shape=(num,), initializer="zeros"))

    def call(self, char_ids):
        char_ids = tf.cast(char_ids, tf.int32)
        shape = tf.shape(char_ids)
        flat = tf.reshape(char_ids, [-1, shape[2]])
        # TF's convolutions mis-shape a zero-size input, so an empty batch
        # skips them.
        features = tf.cond(
            tf.shape(flat)[0] > 0,
            lambda: self._encode_flat(flat),
            lambda: tf.zeros([0, self.n_filters], self.compute_dtype))
        return tf.reshape(features, [shape[0], shape[1], self.n_filters])

    def _encode_flat(self, flat_ids):
        """(n_tokens, max_chars) int -> (n_tokens, n_filters) float."""
        embedded = tf.gather(self.char_embedding, flat_ids)
        activation = tf.nn.relu if self.activation == "relu" else tf.nn.tanh
        pooled = []
        for kernel, bias in zip(self.kernels, self.biases):
            # A tensor, not the variable: the custom gradient returns d_kernel itself.
            conv = conv1d_valid(embedded, tf.convert_to_tensor(kernel))
            pooled.append(activation(tf.reduce_max(conv, axis=1) + bias))
        return tf.concat(pooled, axis=-1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], self.n_filters)

    def get_config(self):
        config = super().get_config()
        config.update({
            "n_characters": self.n_characters,
            "embedding_dim": self.embedding_dim,
            "filters": [list(f) for f in self.filters],
            "activation": self.activation,
        })
        return config


@tf.custom_gradient
def conv1d_valid(x, kernel):
    """`tf.nn.conv1d(x, kernel, 1, "VALID")`: `(n, length, dim)` and
    `(width, dim, num)` -> `(n, length - width + 1, num)`.

    Same forward; the input gradient is one matmul plus `width` shifted
    adds, which on CPUs is about twice as fast as TF's transposed
    convolution for these short, wide-filter convolutions.
    """
    width, dim, num = kernel.shape
    outputs = tf.nn.conv1d(x, kernel, stride=1, padding="VALID")

    def grad(d_outputs):
        n, length = tf.shape(x)[0], tf.shape(x)[1]
        out_length = length - width + 1
        # d_windows[b, t, i, :] is the gradient of x[b, t + i, :].
        d_windows = tf.reshape(
            tf.matmul(tf.reshape(d_outputs, [-1, num]), tf.reshape(kernel, [width * dim, num]),
                      transpose_b=True),
            [n, out_length, width, dim])
        d_x = tf.add_n([tf.pad(d_windows[:, :, i], [[0, 0], [i, width - 1 - i], [0, 0]])
                        for i in range(width)])
        d_kernel = tf.raw_ops.Conv2DBackpropFilter(
            input=x[:, tf.newaxis], filter_sizes=[1, width, dim, num], out_backprop=d_outputs[:, tf.newaxis],
            strides=[1, 1, 1, 1], padding="VALID")[0]
        return d_x, d_kernel

    return outputs, grad
