"""Highway layers (Srivastava et al., 2015) as the original biLM uses them."""
import keras
import tensorflow as tf

from bilm.layers.initializers import dense_initializer
from bilm.ops.bias_add import add_bias
from bilm.ops.matmul_dtype import check_matmul_dtype, matmul


@keras.saving.register_keras_serializable(package="bilm")
class Highway(keras.layers.Layer):
    """A stack of highway layers over the last axis.

    Each layer: `g = sigmoid(x W_carry + b_carry)`,
    `t = relu(x W_transform + b_transform)`, `x = g * t + (1 - g) * x`.
    The carry bias starts at -2.0 (mostly carry the input at first).

    Args:
        n_layers: number of highway layers (0 is the identity).
        matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16 operands in
            the layers' matmuls when called with `training=True` (see
            `bilm.ops.matmul_dtype`); otherwise they are float32.

    Call arguments:
        inputs: float tensor `(..., features)`.
        training: whether `matmul_dtype` applies.

    Returns:
        float tensor of the same shape.
    """

    def __init__(self, n_layers, matmul_dtype="float32", **kwargs):
        super().__init__(**kwargs)
        self.n_layers = n_layers
        self.matmul_dtype = check_matmul_dtype(matmul_dtype)

    def build(self, input_shape):
        features = input_shape[-1]
        self.carry_kernels, self.carry_biases = [], []
        self.transform_kernels, self.transform_biases = [], []
        for k in range(self.n_layers):
            self.carry_kernels.append(self.add_weight(
                name=f"carry_kernel_{k}", shape=(features, features), initializer=dense_initializer(features)))
            self.carry_biases.append(self.add_weight(
                name=f"carry_bias_{k}", shape=(features,), initializer=keras.initializers.Constant(-2.0)))
            self.transform_kernels.append(self.add_weight(
                name=f"transform_kernel_{k}", shape=(features, features), initializer=dense_initializer(features)))
            self.transform_biases.append(self.add_weight(
                name=f"transform_bias_{k}", shape=(features,), initializer="zeros"))

    def call(self, inputs, training=None):
        matmul_dtype = self.matmul_dtype if training else "float32"
        # One 2-D matmul over all leading axes is faster than a batched one.
        x = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]])
        for k in range(self.n_layers):
            gate = tf.sigmoid(add_bias(matmul(x, self.carry_kernels[k], matmul_dtype), self.carry_biases[k]))
            transform = tf.nn.relu(add_bias(matmul(x, self.transform_kernels[k], matmul_dtype),
                                            self.transform_biases[k]))
            x = gate * transform + (1.0 - gate) * x
        return tf.reshape(x, tf.shape(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"n_layers": self.n_layers, "matmul_dtype": self.matmul_dtype})
        return config
