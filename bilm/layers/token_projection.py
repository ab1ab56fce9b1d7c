"""The token encoder's projection to the LSTMs' width: a Dense layer whose inference rows do not depend on the batch."""
import keras

from bilm.backend import fast_layer_call


@keras.saving.register_keras_serializable(package="bilm")
class TokenProjection(keras.layers.Dense):
    """`keras.layers.Dense` (no activation) from the token features to `units`.

    At inference (`training` not true) on TensorFlow the product is
    `bilm.ops.matmul_dtype.kernel_matmul`, whose rows do not depend on how
    many tokens share the call (`bilm.ops.batch_invariant`), so a token's
    encoding is the same in any batch; in training it is Dense's own. The
    weights and their names are Dense's (`kernel` `(features, units)`,
    `bias` `(units,)`), so checkpoints and `.keras` files of a
    `Dense` projection load into it.

    Call arguments:
        inputs: float32 `(..., features)`.
        training: whether the model trains.

    Returns:
        float32 `(..., units)`.
    """

    def call(self, inputs, training=None):
        fast_call = fast_layer_call("token_projection")
        if (training or self.activation not in (None, keras.activations.linear) or self.quantization_mode
                or fast_call is None):
            return super().call(inputs, training=training)
        return fast_call(self, inputs)
