"""The layers' calls on TensorFlow, its CPU fast paths (bilm's C++ kernels, the char CNN's table loop, the
packed and XLA recurrences), run instead of the layers' portable `keras.ops` code, which they are tested
against (`bilm.backend.fast_layer_call` picks them; `PORTABLE` asks for the portable code).

Each takes the layer and its call's arguments. `FAST_CALLS` names them for
`fast_layer_call`.
"""
import functools

import tensorflow as tf

from bilm.ops.bias_add import add_bias
from bilm.ops.char_convolutions import max_pooled_char_convolutions
from bilm.ops.lowbit_matmul import inference_kernel_matmul
from bilm.ops.lstm_bptt import lstm_layer_bptt, lstm_recurrence_bptt
from bilm.ops.lstm_recurrence import lstm_recurrence_packed, lstm_recurrence_xla, packed_steps
from bilm.ops.matmul_dtype import kernel_matmul, matmul, stock_form
from bilm.ops.placement import compiling_with_xla
from bilm.ops.sampled_softmax import sampled_loss_from_rows


def char_cnn(layer, flat_ids, direct_up_to=0):
    """`CharCNN`'s encoding on TensorFlow, the table loop (`bilm.ops.char_convolutions`): `(n_tokens, max_chars)`
    int -> `(n_tokens, n_filters)` float; at most `direct_up_to` tokens run without compiling the loop."""
    # Tensors, not the variables: the custom gradient returns their gradients.
    pooled = max_pooled_char_convolutions(
        flat_ids, tf.convert_to_tensor(layer.char_embedding), [tf.convert_to_tensor(k) for k in layer.kernels],
        direct_up_to=direct_up_to, differentiable=layer.trainable)
    activation = tf.nn.relu if layer.activation == "relu" else tf.nn.tanh
    return activation(add_bias(pooled, tf.concat(layer.biases, axis=0)))


def highway(layer, inputs, training):
    """`Highway.call` on TensorFlow: one 2-D matmul over all leading axes, bilm's inference kernel, the bias
    gradient as a matmul."""
    def product(x, kernel):
        if training:
            return matmul(x, kernel, layer.training_matmul_dtype)
        return inference_kernel_matmul(x, kernel_operand(kernel))

    x = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]])
    for k in range(layer.n_layers):
        gate = tf.sigmoid(add_bias(product(x, layer.carry_kernels[k]), layer.carry_biases[k]))
        transform = tf.nn.relu(add_bias(product(x, layer.transform_kernels[k]), layer.transform_biases[k]))
        x = gate * transform + (1.0 - gate) * x
    return tf.reshape(x, tf.shape(inputs))


def token_projection(layer, inputs):
    """`TokenProjection.call` at inference on TensorFlow (linear, not quantized): one 2-D matmul over all
    leading axes with bilm's kernel product."""
    rows = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]])
    product = kernel_matmul(rows, tf.convert_to_tensor(layer.kernel))
    if layer.bias is not None:
        product = add_bias(product, layer.bias)
    return tf.reshape(product, tf.concat([tf.shape(inputs)[:-1], [layer.units]], axis=0))


def projected_lstm(layer, inputs, lengths, initial_state, training, token_index):
    """`ProjectedLSTM.call` on TensorFlow: the packed graph loop for inference, the XLA loop, the hand-written
    backward pass for training (see the layer's docstring)."""
    lengths = tf.cast(lengths, tf.int32)
    if token_index is not None:
        token_index = tf.cast(token_index, tf.int32)
    batch = tf.shape(inputs if token_index is None else token_index)[0]
    if initial_state is None:
        c0 = tf.zeros([batch, layer.units], tf.float32)
        h0 = tf.zeros([batch, layer.output_dim], tf.float32)
    else:
        c0, h0 = initial_state
    time_steps = (inputs if token_index is None else token_index).shape[1]
    if time_steps == 0:
        # No step to run (the compiled loops cannot even slice a step
        # out of an empty time axis): the states pass through unchanged.
        return tf.zeros([batch, 0, layer.output_dim], inputs.dtype), c0, h0
    projection_kernel = None
    if layer.projection_kernel is not None:
        projection_kernel = kernel_operand(layer.projection_kernel)
    kernels_and_clips = (kernel_operand(layer.recurrent_kernel), projection_kernel,
                         layer.cell_clip, layer.proj_clip)
    if not training and not layer.inference_uses_xla:
        return _packed_inference(layer, inputs, lengths, c0, h0, token_index, kernels_and_clips)
    # XLA has no int8 product of bilm's: its loop takes the widened kernels.
    kernels_and_clips = (*map(stock_form, kernels_and_clips[:2]), *kernels_and_clips[2:])
    # The padded loops: training's, or XLA's for inference.
    if training:
        recurrence = functools.partial(lstm_recurrence_bptt, jit_compile=layer.uses_xla)
    else:
        recurrence = lstm_recurrence_xla
    state_and_kernels = (lengths, c0, h0, *kernels_and_clips)
    if token_index is not None:
        # inputs holds distinct rows: the input half once per row, then gathered.
        if layer.go_backwards:
            token_index = tf.reverse_sequence(token_index, lengths, seq_axis=1, batch_axis=0)
        gates_tm = tf.gather(_input_half(layer, inputs[0], training), tf.transpose(token_index))
        outputs, c, h = recurrence(gates_tm, *state_and_kernels)
    else:
        if layer.go_backwards:
            inputs = tf.reverse_sequence(inputs, lengths, seq_axis=1, batch_axis=0)
        # Time-major; the narrow inputs are transposed rather than the wide gates.
        inputs_tm = tf.transpose(inputs, [1, 0, 2])
        if training:
            # The input half inside the training recurrence, whose
            # gradient makes all three kernels' gradients together.
            outputs, c, h = lstm_layer_bptt(
                inputs_tm, tf.convert_to_tensor(layer.input_kernel), tf.convert_to_tensor(layer.bias),
                *state_and_kernels, matmul_dtype=layer.training_matmul_dtype, jit_compile=layer.uses_xla)
        else:
            # (time, batch, 4 * units) input half of the gates, one matmul.
            rows = tf.reshape(inputs_tm, [-1, tf.shape(inputs)[-1]])
            gates_tm = tf.reshape(_input_half(layer, rows, training), [tf.shape(inputs)[1], batch, 4 * layer.units])
            outputs, c, h = recurrence(gates_tm, *state_and_kernels)
    if layer.go_backwards:
        outputs = tf.reverse_sequence(outputs, lengths, seq_axis=1, batch_axis=0)
    return outputs, c, h

def _packed_inference(layer, inputs, lengths, c0, h0, token_index, kernels_and_clips):
    """Inference in the graph loop over the packed batch (see
    `lstm_recurrence_packed`): only the `sum(lengths)` valid positions
    get an input half and a step."""
    steps = packed_steps(lengths, layer.go_backwards)
    if token_index is None:
        time = tf.shape(inputs)[1]
        gates, gate_index = _input_half(layer, tf.gather_nd(inputs, steps.positions), False), None
    else:
        time = tf.shape(token_index)[1]
        gates, gate_index = _input_half(layer, inputs[0], False), tf.gather_nd(token_index, steps.positions)
    return lstm_recurrence_packed(gates, gate_index, steps, time, c0, h0, *kernels_and_clips)

def _input_half(layer, rows, training):
    """`rows @ W_x + b`, `(n, input_dim)` -> `(n, 4 * units)`: with
    `training_matmul_dtype` operands in training, else in the kernel's dtype (TensorFlow's)."""
    if training:
        product = matmul(rows, layer.input_kernel, layer.training_matmul_dtype)
    else:
        product = inference_kernel_matmul(rows, kernel_operand(layer.input_kernel))
    return add_bias(product, layer.bias)


def kernel_operand(kernel):
    """What TensorFlow's ops take for a layer's kernel (`bilm.layers.kernel_weights.add_kernel`): a tensor, or a
    `ScaledKernel` (an `Int8Kernel`'s)."""
    if hasattr(kernel, "operand"):  # an Int8Kernel
        return kernel.operand()
    return tf.convert_to_tensor(kernel)


def unique_tokens(layer, char_ids):
    """`UniqueTokens`'s distinct rows, in order of first appearance (`tf.unique` along rows); while a function
    compiled with XLA is traced, whose shapes cannot depend on the ids, every row stands for itself."""
    max_chars = tf.shape(char_ids[0])[2]
    flat = [tf.reshape(ids, [-1, max_chars]) for ids in char_ids]
    rows = tf.concat(flat, axis=0)
    if compiling_with_xla():
        unique, index = rows, tf.range(tf.shape(rows)[0])
    else:
        unique, index = tf.raw_ops.UniqueV2(x=rows, axis=[0])
    sizes = [tf.shape(f)[0] for f in flat]
    indices = [tf.reshape(part, tf.shape(ids)[:2]) for part, ids in zip(tf.split(index, sizes), char_ids)]
    return unique[tf.newaxis], indices


def language_model(language_model, token_cache_size):
    """`BidirectionalLanguageModel`'s calls on TensorFlow (`language_model_calls.TensorFlowCalls`)."""
    from bilm.backend.tensorflow.language_model_calls import TensorFlowCalls  # it needs the models, built on this

    return TensorFlowCalls(language_model, token_cache_size)


def sampled_softmax_from_rows(inputs, rows, row_biases, labels, sampled, matmul_dtype):
    """`bilm.training.model.softmax_losses.sampled_softmax_loss_from_rows` with TensorFlow's gradient by hand
    (`bilm.ops.sampled_softmax`), the accidental hits found on int64 ids."""
    return sampled_loss_from_rows(inputs, rows, row_biases, tf.cast(labels, tf.int64), tf.cast(sampled, tf.int64),
                                  matmul_dtype)


FAST_CALLS = {"char_cnn": char_cnn, "unique_tokens": unique_tokens, "highway": highway,
              "token_projection": token_projection,
              "projected_lstm": projected_lstm, "language_model": language_model,
              "sampled_softmax_from_rows": sampled_softmax_from_rows}
