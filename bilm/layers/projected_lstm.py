"""The biLM's LSTM: TF1 `LSTMCell` with projection and clipping, over a sequence.

Gate layout is kept as in the original weight files (`i, j, f, o`, forget
bias 1.0 added at run time, state `(c, h)`), so the file edge only splits
`W_0` into its input and recurrent halves.
"""
import keras
from keras import ops

from bilm.backend import backend_module, fast_layer_call
from bilm.errors import UserError
from bilm.layers.initializers import Filled, glorot_uniform, uniform
from bilm.layers.kernel_weights import add_kernel
from bilm.ops.kernel_dtypes import check_kernel_dtype, check_matmul_dtype
from bilm.ops.lstm_scan import lstm_scan


@keras.saving.register_keras_serializable(package="bilm")
class ProjectedLSTM(keras.layers.Layer):
    """One LSTM layer with an optional projection, run over whole sequences.

    With `z = x_t W_x + h_{t-1} W_h + b` split as `i, j, f, o`:
    `c_t = clip(sigmoid(f + 1) * c_{t-1} + sigmoid(i) * tanh(j), cell_clip)`,
    `m_t = sigmoid(o) * tanh(c_t)`, `h_t = clip(m_t W_p, proj_clip)` (or
    `h_t = m_t` without projection).

    The input half `x W_x + b` is one matmul over all time steps; only the
    recurrence runs step by step, inside a loop. Steps at or
    beyond a row's length leave the state unchanged and output zeros.
    The portable code is `bilm.ops.lstm_scan` (`keras.ops`, every backend);
    on TensorFlow the fast paths below run instead (`bilm.utils.backend`).
    There, inference runs a packed batch (`bilm.ops.lstm_recurrence`): rows
    longest first, each step computing only the rows still inside their
    length, so padding costs neither input-half rows nor step rows. On JAX
    at inference on a CPU each step computes its own rows' input half where
    that is faster (`bilm.backend.jax.lstm_input_steps`).
    With `go_backwards=True` each row is read reversed *within its own
    length* and the outputs are put back in input order.

    Args:
        units: LSTM cell size (`dim`).
        projection_dim: output size; `None` or `units` means no projection.
        cell_clip: clip the cell state to `[-cell_clip, cell_clip]`, or None.
        proj_clip: clip the projected output, or None.
        go_backwards: read each row right to left within its length.
        jit_compile: compile the recurrence with XLA, which fuses each
            step's elementwise work. In training (the forward and the
            backward loop): `True`/`False`: always/never; `None` (default):
            only when the recurrent kernel is small (see `uses_xla`). In
            inference (`training` false) the packed graph loop runs, which
            is faster at both released sizes, except with `True`, or with
            `None` in a trainable layer whose kernel is small: there the
            padded, masked XLA loop runs, whose hand-written gradient
            makes fine-tuning through it (e.g. `ELMoEmbedding(...,
            trainable_bilm=True)`) faster (docs/performance.md).
        training_matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16 operands in
            the input half's matmul when called with `training=True` (see
            `bilm.ops.matmul_dtype`). The recurrence is float32 either way.
        kernel_dtype: `"float32"`, or `"bfloat16"` to keep the
            input, recurrent and projection kernels in bfloat16 (rounded
            once, when assigned) for inference: every product with them
            accumulates in float32, with bfloat16 activations (at any number
            of rows where `bilm.ops.lowbit_matmul.bfloat16_dot_products()`),
            else with float32 ones where it has at most
            `bilm.ops.lowbit_matmul.MAX_STREAMED_ROWS` rows
            (`bilm.ops.lowbit_matmul.inference_kernel_matmul`); the bias,
            the states and all elementwise work stay float32. `"int8"`
            keeps them in int8 with a float32 scale per output column
            (`bilm.layers.int8_kernel.Int8Kernel`, quantized when
            assigned), with float32 activations. Such layers refuse
            `training=True`.
        kernel_initializer: None for the original's initialization (below),
            or a Keras initializer for every kernel, e.g. `"zeros"` for a
            layer whose weights are about to be loaded.

    Call arguments:
        inputs: float `(batch, time, input_dim)`.
        lengths: int `(batch,)`, the number of valid steps of each row.
        initial_state: optional `[c (batch, units), h (batch, output_dim)]`;
            zeros when omitted.
        training: use the recurrence with a hand-written backward pass
            (`bilm.ops.lstm_bptt`; same outputs, faster gradients) and
            `training_matmul_dtype`.
        token_index: optional int `(batch, time)`. Then `inputs` is
            `(1, n_distinct, input_dim)`, the distinct input rows, and row
            b reads `inputs[0, token_index[b, t]]` at step t; the input
            half of the gates is computed once per distinct row.

    Returns:
        `(outputs, final_c, final_h)`: `(batch, time, output_dim)`,
        `(batch, units)`, `(batch, output_dim)`, the final state taken at
        each row's last valid step.
    """

    def __init__(self, units, projection_dim=None, cell_clip=None, proj_clip=None,
                 go_backwards=False, jit_compile=None, training_matmul_dtype="float32", kernel_dtype="float32",
                 kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.go_backwards = go_backwards
        self.jit_compile = jit_compile
        self.training_matmul_dtype = check_matmul_dtype(training_matmul_dtype, "training_matmul_dtype")
        self.kernel_dtype = check_kernel_dtype(kernel_dtype, "kernel_dtype")
        self.kernel_initializer = None if kernel_initializer is None else keras.initializers.get(kernel_initializer)
        self.use_projection = projection_dim is not None and projection_dim != units
        self.output_dim = projection_dim if self.use_projection else units

    def build(self, input_shape):
        input_dim = input_shape[-1]
        # W_x and W_h are the two blocks of one glorot-uniform matrix over
        # (input_dim + output_dim, 4 * units). Each block needs its own
        # initializer: an unseeded Keras initializer fixes its seed when
        # made, so one instance would draw W_h as a copy of W_x's first rows.
        limit = (6.0 / (input_dim + self.output_dim + 4 * self.units)) ** 0.5
        # Inference in 16 or 8 bits keeps the kernels so: rounded once, when assigned.
        kernel_dtype, given = self.kernel_dtype, self.kernel_initializer
        self.input_kernel = add_kernel(self, "input_kernel", (input_dim, 4 * self.units),
                                       given or uniform(limit), kernel_dtype)
        self.recurrent_kernel = add_kernel(self, "recurrent_kernel", (self.output_dim, 4 * self.units),
                                           given or uniform(limit), kernel_dtype)
        self.bias = self.add_weight(name="bias", shape=(4 * self.units,), initializer=Filled(0.0))
        if self.use_projection:
            self.projection_kernel = add_kernel(self, "projection_kernel", (self.units, self.output_dim),
                                                given or glorot_uniform(self.units, self.output_dim), kernel_dtype)
        else:
            self.projection_kernel = None

    def call(self, inputs, lengths, initial_state=None, training=None, token_index=None):
        if training and self.kernel_dtype != "float32":
            raise UserError(
                f"ProjectedLSTM '{self.name}' keeps its kernels in {self.kernel_dtype} for inference "
                f"and cannot be called with training=True. Received: kernel_dtype="
                f"{self.kernel_dtype!r}; build it with kernel_dtype='float32' to train.")
        fast_call = fast_layer_call("projected_lstm")
        if fast_call is not None:
            return fast_call(self, inputs, lengths, initial_state, training, token_index)
        return self.portable_call(inputs, lengths, initial_state, training, token_index, lstm_scan)

    def portable_call(self, inputs, lengths, initial_state, training, token_index, scan):
        """`call`'s portable code with the sequence function `scan` (`bilm.ops.lstm_scan.lstm_scan`, or a
        backend's own with its arguments), the initial state zeros where none is given."""
        batch = ops.shape(inputs if token_index is None else token_index)[0]
        if initial_state is None:
            initial_state = (ops.zeros((batch, self.units), "float32"), ops.zeros((batch, self.output_dim), "float32"))
        return scan(inputs, lengths, *initial_state, self.input_kernel, self.recurrent_kernel, self.bias,
                    self.projection_kernel, self.cell_clip, self.proj_clip, self.go_backwards, token_index,
                    input_matmul_dtype=self.training_matmul_dtype if training else "float32",
                    recurrence=backend_module("core").lstm_steps)

    def column_kernels(self):
        """The float32 recurrent and projection kernels, whose transposes a backend may keep for inference steps of
        few rows in columns (`bilm.backend.jax.lstm_column_steps`); none where the kernels are bfloat16 or int8."""
        if self.kernel_dtype != "float32":
            return []
        return [kernel for kernel in (self.recurrent_kernel, self.projection_kernel) if kernel is not None]

    @property
    def uses_xla(self):
        """Whether the training recurrence (forward and backward loops) runs
        under XLA. On a CPU, XLA wins where per-step elementwise work and op
        overhead dominate (kernels that stay in cache: the small released
        size) and loses where each step streams a large kernel from memory,
        where XLA's matmul is slower (the original size);
        docs/performance.md has the measurements."""
        if self.jit_compile is not None:
            return self.jit_compile
        return self.output_dim * 4 * self.units * 4 <= XLA_AUTO_MAX_KERNEL_BYTES

    @property
    def inference_uses_xla(self):
        """Whether inference runs the padded XLA loop rather than the packed
        one: with `jit_compile=True`, or in a trainable layer where
        `uses_xla` (gradients may flow through it, and the XLA loop's
        hand-written backward pass beats autodiff of the packed loop); and
        always while a function compiled with XLA is traced."""
        from bilm.ops.placement import compiling_with_xla

        if compiling_with_xla():  # the packed loop's shapes depend on the lengths
            return True
        return bool(self.jit_compile) or (self.jit_compile is None and self.trainable and self.uses_xla)

    def compute_output_shape(self, inputs_shape, lengths_shape, initial_state_shape=None,
                             token_index_shape=None):
        batch, time = (inputs_shape if token_index_shape is None else token_index_shape)[:2]
        return (batch, time, self.output_dim), (batch, self.units), (batch, self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update({
            "units": self.units,
            "projection_dim": self.projection_dim,
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
            "go_backwards": self.go_backwards,
            "jit_compile": self.jit_compile,
            "training_matmul_dtype": self.training_matmul_dtype,
            "kernel_dtype": self.kernel_dtype,
            "kernel_initializer": (None if self.kernel_initializer is None
                                   else keras.initializers.serialize(self.kernel_initializer)),
        })
        return config


# Recurrent kernels up to this size run under XLA by default.
XLA_AUTO_MAX_KERNEL_BYTES = 8 * 2 ** 20
