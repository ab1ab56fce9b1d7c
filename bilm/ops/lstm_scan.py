"""The projected LSTM over a sequence in `keras.ops`: the portable recurrence, on every backend.

The same arithmetic as TensorFlow's fast paths (`bilm.ops.lstm_recurrence`,
`bilm.ops.lstm_bptt`) and the original's TF1 `LSTMCell`: gates `i, j, f, o`
with the forget bias 1.0 added at run time, the cell and the projection
clipped. The loop is `keras.ops.scan` over fixed shapes, so JAX compiles
and differentiates it whole; steps at or beyond a row's length leave its
state unchanged and output zeros.
"""
import keras
from keras import ops


def lstm_scan(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias,
              projection_kernel=None, cell_clip=None, proj_clip=None, go_backwards=False, token_index=None,
              input_matmul_dtype="float32", recurrence=None, product=None):
    """Runs one LSTM layer over whole sequences.

    Args:
        inputs: float32 `(batch, time, input_dim)`; with `token_index`,
            `(1, n_distinct, input_dim)`, the distinct rows that row b reads
            at step t as `inputs[0, token_index[b, t]]`.
        lengths: int `(batch,)`, each row's number of valid steps.
        initial_c, initial_h: float32 `(batch, units)`, `(batch, output_dim)`.
        input_kernel: `(input_dim, 4 * units)`; recurrent_kernel:
            `(output_dim, 4 * units)`; bias: `(4 * units,)`;
            projection_kernel: `(units, output_dim)` or None (then
            `output_dim == units`). Kernels of another float dtype
            (bfloat16) are widened to float32 (`widened`) for the products,
            except where `recurrence` takes them as they are.
        cell_clip, proj_clip: Python floats or None.
        go_backwards: read each row right to left within its own length;
            the outputs come back in input order.
        token_index: optional int `(batch, time)`, see `inputs`.
        input_matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16
            operands (and result, widened back) in the input half's matmul,
            as training's `matmul_dtype` asks (`bilm.ops.matmul_dtype`); the
            recurrence is float32 either way.
        recurrence: the backend's steps over the time axis,
            `bilm.backend.<name>.core.lstm_steps` (`ProjectedLSTM`
            passes it; the arguments and results of `lstm_steps`
            here, the recurrent and projection kernels as given: it widens
            those it does not take); None: `lstm_steps` with `carry_shaped_scan`, which
            runs on every backend.
        product: the backend's float32 product for the input half,
            `product(x (rows, input_dim), kernel) -> (rows, 4 * units)`
            (PyTorch's native one at inference); None: `keras.ops.matmul`.

    Returns:
        `(outputs, final_c, final_h)`: float32 `(batch, time, output_dim)`
        (zeros beyond each row's length), `(batch, units)`,
        `(batch, output_dim)`, the state after each row's last valid step.
    """
    input_kernel, bias = widened(input_kernel), widened(bias)
    lengths = ops.cast(lengths, "int32")
    valid, order, read = reading_order(inputs, lengths, go_backwards, token_index)
    if token_index is not None:
        # The distinct tokens' gates (n_distinct, 4 * units), each step's rows picked by the recurrence.
        gates = input_product(inputs[0], input_kernel, input_matmul_dtype, product)
        gate_index = read
    else:
        gates = input_product(read, input_kernel, input_matmul_dtype, product)
        gate_index = None
    valid_tm = ops.expand_dims(ops.transpose(valid), -1)  # (time, batch, 1)
    outputs_tm, final_c, final_h = (recurrence or lstm_steps)(
        gates, valid_tm, ops.cast(initial_c, "float32"), ops.cast(initial_h, "float32"), recurrent_kernel,
        projection_kernel, cell_clip, proj_clip, gate_index=gate_index, bias=bias)
    outputs = ops.transpose(outputs_tm, (1, 0, 2))
    if order is not None:
        outputs = take_rows(outputs, order)
    return outputs, final_c, final_h


def reading_order(inputs, lengths, go_backwards=False, token_index=None):
    """What `lstm_scan`'s steps read, in the order they read it: `(valid, order, read)`, `valid` bool
    `(batch, time)` (the steps inside each row's length), `order` int `(batch, time)` (the position step t of a
    backward row reads, `length - 1 - t` within its length, an involution; None forwards) and `read` the
    time-major inputs in that order, `(time, batch, input_dim)`, or with `token_index` the indices, `(time,
    batch)` int32."""
    time = ops.shape(inputs if token_index is None else token_index)[1]
    steps = ops.expand_dims(ops.arange(time, dtype="int32"), 0)
    valid = steps < ops.expand_dims(lengths, 1)  # (batch, time)
    order = ops.where(valid, ops.expand_dims(lengths, 1) - 1 - steps, steps) if go_backwards else None
    if token_index is not None:
        index = ops.cast(token_index, "int32")
        if order is not None:
            index = ops.take_along_axis(index, order, axis=1)
        return valid, order, ops.transpose(index)
    if order is not None:
        inputs = take_rows(inputs, order)
    return valid, order, ops.transpose(inputs, (1, 0, 2))


def lstm_steps(gates_tm, valid_tm, initial_c, initial_h, recurrent_kernel, projection_kernel, cell_clip, proj_clip,
               scan=None, gate_index=None, bias=None):
    """The LSTM's steps over the time axis, in `keras.ops`: the portable recurrence under `lstm_scan`.

    Args:
        gates_tm: float32 `(time, batch, 4 * units)`, the input half of the
            gates, `x_t W_x + b` in `i, j, f, o` order; or with
            `gate_index`, int `(time, batch)`, the rows `(n, 4 * units)`
            it picks from (step t of row b reads `gates_tm[gate_index[t,
            b]]`: one row per distinct token; a backend's native steps read
            them in place, the others take them first). bias: float32
            `(4 * units,)` or None, added to the gates (the input half
            `x W_x` then; native steps add it as they read each row).
        valid_tm: bool `(time, batch, 1)`: steps beyond a row's length leave
            its state unchanged and output zeros.
        initial_c, initial_h: float32 `(batch, units)`, `(batch, output_dim)`.
        recurrent_kernel, projection_kernel, cell_clip, proj_clip: as
            `lstm_scan`'s (a bfloat16 kernel is widened: the products are
            float32).
        scan: the backend's `scan(step, initial, xs, output_width)`
            (`bilm.backend.<name>.core.scan`); None: `carry_shaped_scan`.

    Returns:
        `(outputs_tm, final_c, final_h)`: float32 `(time, batch,
        output_dim)`, `(batch, units)`, `(batch, output_dim)`.
    """
    units = ops.shape(initial_c)[-1]
    recurrent_kernel, projection_kernel = widened(recurrent_kernel), widened(projection_kernel)
    gates_tm = gates_and_bias(gates_tm, gate_index, bias)

    # One carry tensor, [c, h]: TensorFlow's `keras.ops.scan` takes no carry of several shapes.
    def step(state, step_inputs):
        gates, step_valid = step_inputs
        new_c, new_h = lstm_cell(ops, gates, state[:, :units], state[:, units:], recurrent_kernel, projection_kernel,
                                 cell_clip, proj_clip)
        state = ops.where(step_valid, ops.concatenate([new_c, new_h], axis=-1), state)
        return state, ops.where(step_valid, new_h, ops.zeros_like(new_h))

    initial = ops.concatenate([initial_c, initial_h], axis=-1)
    final, outputs_tm = (scan or carry_shaped_scan)(step, initial, (gates_tm, valid_tm), ops.shape(initial_h)[-1])
    return outputs_tm, final[:, :units], final[:, units:]


def lstm_cell(math, gates, c, h, recurrent_kernel, projection_kernel, cell_clip, proj_clip):
    """One step's `(new_c, new_h)` before masking, from the input half of the gates `(batch, 4 * units)`: the
    arithmetic of every backend's steps, written once. `math` holds `matmul`, `split(x, n, axis)`, `sigmoid`,
    `tanh` and `clip(x, low, high)` (`keras.ops`, or a backend's own ops that compute the same values)."""
    zi, zj, zf, zo = math.split(gates + math.matmul(h, recurrent_kernel), 4, axis=-1)
    new_c = math.sigmoid(zf + 1.0) * c + math.sigmoid(zi) * math.tanh(zj)
    if cell_clip is not None:
        new_c = math.clip(new_c, -cell_clip, cell_clip)
    new_h = math.sigmoid(zo) * math.tanh(new_c)
    if projection_kernel is not None:
        new_h = math.matmul(new_h, projection_kernel)
        if proj_clip is not None:
            new_h = math.clip(new_h, -proj_clip, proj_clip)
    return new_c, new_h


def carry_shaped_scan(step, initial, xs, output_width):
    """`keras.ops.scan(step, initial, xs)` for a carry `(batch, n)` and outputs `(batch, output_width)`, on any
    backend: each output rides at the end of a carry-shaped row (TensorFlow's `keras.ops.scan` takes no other
    shape), `(n - output_width)` more floats a step than the outputs need."""
    def padded_step(state, step_inputs):
        state, output = step(state, step_inputs)
        return state, ops.concatenate([ops.zeros_like(state[:, :-output_width]), output], axis=-1)

    final, padded = ops.scan(padded_step, initial, xs)
    return final, padded[..., -output_width:]


def input_product(x, kernel, matmul_dtype, product=None):
    """`x @ kernel` for `x` `(..., n)`, as one 2-D product: the kernel's gradient is then `rows^T @ gradient`
    over all rows, which XLA runs on a CPU without first transposing the gate gradients (docs/performance.md).
    A float32 product is `product(x, kernel)` where given (`lstm_scan`'s), else `keras.ops.matmul`."""
    shape = ops.shape(x)
    x = ops.reshape(x, (-1, shape[-1]))
    if matmul_dtype == "bfloat16":
        result = ops.cast(ops.matmul(ops.cast(x, "bfloat16"), ops.cast(kernel, "bfloat16")), "float32")
    else:
        result = (product or ops.matmul)(x, kernel)
    return ops.reshape(result, (*shape[:-1], ops.shape(kernel)[-1]))


def gates_and_bias(gates, gate_index=None, bias=None):
    """`lstm_steps`' gates as one `(time, batch, 4 * units)` tensor: `gates + bias` (None: nothing added), the
    rows `gate_index` picks where it is given. For steps that do not read them in place."""
    gates = gates if bias is None else gates + bias
    return gates if gate_index is None else ops.take(gates, gate_index, axis=0)


def widened(kernel):
    """`kernel` as float32 (a bfloat16 kernel widened; None stays None)."""
    if kernel is None:
        return None
    return kernel if keras.backend.standardize_dtype(kernel.dtype) == "float32" else ops.cast(kernel, "float32")


def take_rows(x, order):
    """`x[b, order[b, t]]` for `x` `(batch, time, n)` and int `order` `(batch, time)`."""
    index = ops.broadcast_to(ops.expand_dims(order, -1), ops.shape(x))
    return ops.take_along_axis(x, index, axis=1)
