"""Highway layers (Srivastava et al., 2015) as the original biLM uses them."""
import keras
from keras import ops

from bilm.backend import fast_layer_call
from bilm.errors import UserError
from bilm.layers.initializers import Filled, dense_initializer
from bilm.layers.kernel_weights import add_kernel
from bilm.ops.kernel_dtypes import check_kernel_dtype, check_matmul_dtype


@keras.saving.register_keras_serializable(package="bilm")
class Highway(keras.layers.Layer):
    """A stack of highway layers over the last axis.

    Each layer: `g = sigmoid(x W_carry + b_carry)`,
    `t = relu(x W_transform + b_transform)`, `x = g * t + (1 - g) * x`.
    The carry bias starts at -2.0 (mostly carry the input at first).

    Args:
        n_layers: number of highway layers (0 is the identity).
        training_matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16 operands in
            the layers' matmuls when called with `training=True` (see
            `bilm.ops.matmul_dtype`).
        kernel_dtype: `"float32"`, or `"bfloat16"` to keep the
            kernels in bfloat16 (rounded once, when assigned) for inference:
            the matmuls accumulate in float32 (activations rounded to
            bfloat16, except in products of few rows: see
            `bilm.ops.lowbit_matmul.inference_kernel_matmul`), the rest is
            float32. `"int8"`: int8 kernels with a float32 scale per
            output column (`bilm.layers.int8_kernel.Int8Kernel`) and
            float32 activations. Such layers refuse `training=True`.
        kernel_initializer: None for the original's initialization, or a
            Keras initializer for every kernel (`"zeros"` for a layer whose
            weights are about to be loaded).

    Call arguments:
        inputs: float tensor `(..., features)`.
        training: whether `training_matmul_dtype` applies (else the kernels' dtype).

    Returns:
        float tensor of the same shape.
    """

    def __init__(self, n_layers, training_matmul_dtype="float32", kernel_dtype="float32", kernel_initializer=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.n_layers = n_layers
        self.training_matmul_dtype = check_matmul_dtype(training_matmul_dtype, "training_matmul_dtype")
        self.kernel_dtype = check_kernel_dtype(kernel_dtype, "kernel_dtype")
        self.kernel_initializer = None if kernel_initializer is None else keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        features = input_shape[-1]
        self.carry_kernels, self.carry_biases = [], []
        self.transform_kernels, self.transform_biases = [], []
        for k in range(self.n_layers):
            self.carry_kernels.append(add_kernel(self, f"carry_kernel_{k}", (features, features),
                                                 self.kernel_initializer or dense_initializer(features),
                                                 self.kernel_dtype))
            self.carry_biases.append(self.add_weight(
                name=f"carry_bias_{k}", shape=(features,), initializer=Filled(-2.0)))
            self.transform_kernels.append(add_kernel(self, f"transform_kernel_{k}", (features, features),
                                                     self.kernel_initializer or dense_initializer(features),
                                                     self.kernel_dtype))
            self.transform_biases.append(self.add_weight(
                name=f"transform_bias_{k}", shape=(features,), initializer=Filled(0.0)))

    def call(self, inputs, training=None):
        if training and self.kernel_dtype != "float32":
            raise UserError(
                f"Highway '{self.name}' keeps its kernels in {self.kernel_dtype} for inference and "
                f"cannot be called with training=True. Received: kernel_dtype="
                f"{self.kernel_dtype!r}; build it with kernel_dtype='float32' to train.")

        fast_call = fast_layer_call("highway")
        if fast_call is not None:
            return fast_call(self, inputs, training)
        return self.portable_layers(inputs, self.portable_product(training))

    def portable_layers(self, x, product):
        """The layers over `x` `(..., features)` in `keras.ops`, each kernel's product taken by
        `product(x, kernel) -> x @ kernel` (`(..., features)`, float32)."""
        for k in range(self.n_layers):
            gate = ops.sigmoid(product(x, self.carry_kernels[k]) + self.carry_biases[k])
            transform = ops.relu(product(x, self.transform_kernels[k]) + self.transform_biases[k])
            x = gate * transform + (1.0 - gate) * x
        return x

    def column_kernels(self):
        """The float32 kernels (carry and transform) whose transposes a backend may keep for inference products
        of few rows (`bilm.backend.jax.column_kernels`); none where the kernels are bfloat16 or int8."""
        if self.kernel_dtype != "float32":
            return []
        return [*self.carry_kernels, *self.transform_kernels]

    def portable_product(self, training):
        """`(x, kernel) -> x @ kernel` in float32, in `keras.ops`: with bfloat16 operands in training
        where `training_matmul_dtype` asks; a bfloat16 kernel widened (exactly) to float32."""
        def product(x, kernel):
            if training and self.training_matmul_dtype == "bfloat16":
                return ops.cast(ops.matmul(ops.cast(x, "bfloat16"), ops.cast(kernel, "bfloat16")), "float32")
            return ops.matmul(x, ops.cast(kernel, "float32"))
        return product

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"n_layers": self.n_layers, "training_matmul_dtype": self.training_matmul_dtype,
                       "kernel_dtype": self.kernel_dtype,
                       "kernel_initializer": (None if self.kernel_initializer is None
                                              else keras.initializers.serialize(self.kernel_initializer))})
        return config
