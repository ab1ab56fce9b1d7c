"""The layers' calls of PyTorch's own (`bilm.backend.fast_layer_call`): `UniqueTokens`'s distinct rows (PyTorch
runs eagerly, so their number may depend on the ids), the char CNN (where a gradient of its weights is recorded,
over the columns its rows' characters reach, max-pooled by `torch.max`; elsewhere on a CPU by bilm's native table
lookups), and, where no gradient is recorded (as in a frozen model's call in a training step), the highway's products
and an LSTM layer's input half by bilm's native product, the input half for only the positions inside their rows'
lengths; every other layer runs its portable `keras.ops` code."""
import functools
import weakref

import keras
import torch
from keras import ops

from bilm.backend.torch.core import records_gradient
from bilm.ops.char_convolutions_portable import needed_columns, portable_char_convolutions
from bilm.ops.lstm_scan import lstm_scan
from bilm.ops.native import portable_kernels


def unique_tokens(layer, char_ids):
    """`UniqueTokens`'s distinct rows (ascending, `torch.unique` along rows) and each position's index."""
    flat = [torch.reshape(ids, (-1, ids.shape[2])) for ids in char_ids]
    unique, index = torch.unique(torch.cat(flat), dim=0, return_inverse=True)
    indices = [torch.reshape(part, tuple(ids.shape[:2])).to(torch.int32)
               for part, ids in zip(torch.split(index, [f.shape[0] for f in flat]), char_ids)]
    return unique[None], indices


def char_cnn(layer, flat_ids, direct_up_to=0):
    """`CharCNNEncoder`'s features of `flat_ids` `(n, width)`. Where a gradient of its weights is recorded
    (`records_gradient`: a training step of the layer):
    over the columns the rows' characters and one window of the widest filter past them reach (`needed_columns`;
    PyTorch runs eagerly, so the count may depend on the ids), max-pooled by `first_maximum_char_convolutions`.
    Elsewhere on a CPU by bilm's native table lookups (`native_char_convolutions`), else the portable code. The same
    values to float32 round-off."""
    del direct_up_to  # TensorFlow's inference path
    if not records_gradient(layer.weights):  # the ids need none
        native = flat_ids.device.type == "cpu" and portable_kernels.load_library() is not None
        return layer.portable_features(flat_ids, convolutions=functools.partial(native_char_convolutions, layer)
                                       if native else portable_char_convolutions)
    columns = needed_columns(ops.convert_to_numpy(flat_ids), max(width for width, _ in layer.filters))
    return layer.portable_features(flat_ids[:, :columns], convolutions=first_maximum_char_convolutions)


def native_char_convolutions(layer, char_ids, char_embedding, kernels):
    """`bilm.ops.char_convolutions_portable.portable_char_convolutions` of `layer`'s weights (its arguments and
    values, to float32 round-off) by bilm's native table lookups (`bilm.ops.native.portable_kernels.char_max_pooled`,
    on the CPU tensors' memory), for inference: no multiply-adds per window, and a token's values the same bytes at
    any number of tokens beside it. The tables are made once for the weights and kept while their tensors are the
    same and unchanged (a tensor's version counts its in-place changes, as Keras's `assign` makes them), for as
    long as the layer lives."""
    weights = [ops.convert_to_tensor(w) for w in (char_embedding, *kernels)]  # a variable's own tensor
    key = tuple((id(w), w.data_ptr(), w._version, w.dtype) for w in weights)
    kept = _TABLES.get(layer)
    if kept is None or kept[0] != key:
        arrays = [w.detach().to(torch.float32).numpy() for w in weights]
        # The weights themselves are kept beside their tables, so that their ids name no other tensor meanwhile.
        kept = _TABLES[layer] = (key, portable_kernels.char_tables(arrays[0], arrays[1:]), weights)
    return torch.from_numpy(portable_kernels.char_max_pooled(char_ids.numpy(), kept[1]))


# The char CNN's tables (`native_char_convolutions`) by layer: (the weights' ids, addresses, versions and dtypes;
# the tables; the weights).
_TABLES = weakref.WeakKeyDictionary()


def first_maximum_char_convolutions(char_ids, char_embedding, kernels):
    """`bilm.ops.char_convolutions_portable.portable_char_convolutions` (its arguments and values), max-pooled by
    `torch.max`, whose gradient goes to the first maximising window, as TensorFlow's table loop gives it: one
    scatter, where `torch.amax`'s gradient builds masks of every window to share it among tied ones. Windows
    that tie are identical (the run of padding chars that ends each row), so the gradient is the same."""
    embedded = ops.take(char_embedding, ops.cast(char_ids, "int32"), axis=0)  # (n_tokens, max_chars, dim)
    pooled = [torch.max(ops.conv(embedded, kernel, strides=1, padding="valid"), dim=1).values for kernel in kernels]
    return torch.cat(pooled, dim=-1)


def highway(layer, inputs, training):
    """`Highway.call`: where no gradient is recorded, on a CPU, each float32 kernel's product by `native_product`;
    elsewhere the portable products. The same values to float32 round-off."""
    portable = layer.portable_product(training)
    if not (_no_gradient_on_cpu(layer, training, inputs) and portable_kernels.load_library() is not None):
        return layer.portable_layers(inputs, portable)
    native = {id(kernel) for kernel in layer.column_kernels()}

    def product(x, kernel):
        if id(kernel) not in native or x.dtype != torch.float32:
            return portable(x, kernel)
        return native_product(x, kernel)

    return layer.portable_layers(inputs, product)


def native_product(x, kernel):
    """`x @ kernel` for a float32 CPU tensor `x` `(..., n)` and a float32 kernel `(n, m)` (a variable or tensor) by
    bilm's native product (`portable_kernels.matmul`), on the tensors' memory: the kernel streamed once for each
    group of 8 rows, each row's sums the same bytes at any number of rows. Faster than torch's own product at every
    row count on the CPU measured (docs/performance.md)."""
    flat = torch.reshape(x, (-1, x.shape[-1])).detach().numpy()
    value = ops.convert_to_tensor(kernel).detach().numpy()
    return torch.reshape(torch.from_numpy(portable_kernels.matmul(flat, value)), (*x.shape[:-1], value.shape[1]))


def _no_gradient_on_cpu(layer, training, inputs):
    """Whether `layer`'s call of `inputs` records no gradient (`training` false, and `records_gradient` false of the
    inputs and the layer's weights: a frozen layer in a training step records none) and runs on a CPU: where its
    native paths run."""
    return not (training or records_gradient(inputs, layer.weights)
                or keras.tree.flatten(inputs)[0].device.type != "cpu")


def projected_lstm(layer, inputs, lengths, initial_state, training, token_index):
    """`ProjectedLSTM.call`: where no gradient is recorded, on a CPU (where it is measured, and the native
    recurrence reads the picked rows in place), the input half by `native_product` (where the library is built),
    and a layer of one row a position (no `token_index`) by `inside_positions_scan`; elsewhere the portable code.
    The same values to float32 round-off."""
    inference = _no_gradient_on_cpu(layer, training, inputs)
    scan = inside_positions_scan if inference and token_index is None else lstm_scan
    if inference and portable_kernels.load_library() is not None:
        scan = functools.partial(scan, product=native_product)
    return layer.portable_call(inputs, lengths, initial_state, training, token_index, scan)


def inside_positions_scan(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias,
                          projection_kernel=None, cell_clip=None, proj_clip=None, go_backwards=False, token_index=None,
                          input_matmul_dtype="float32", recurrence=None, product=None):
    """`bilm.ops.lstm_scan.lstm_scan` (its arguments and results; `token_index` None) with the input half made for
    only the positions inside their rows' lengths (PyTorch runs eagerly, so their number may depend on the
    lengths): those positions are passed as the rows that a `token_index` picks, which the recurrence reads in
    place. A batch of sentences of unequal lengths then makes no input half for its padding."""
    if token_index is not None:
        raise ValueError("inside_positions_scan takes one row a position (token_index None)")
    inputs, lengths = ops.convert_to_tensor(inputs), ops.convert_to_tensor(lengths).to(torch.int64)
    batch, time = inputs.shape[:2]
    inside = (torch.arange(time, device=inputs.device)[None, :] < lengths[:, None]).reshape(-1)
    positions = torch.nonzero(inside).squeeze(1)
    if len(positions) == batch * time:  # no padding: the rows as they are, not a copy of them
        return lstm_scan(inputs, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias,
                         projection_kernel, cell_clip, proj_clip, go_backwards, None, input_matmul_dtype, recurrence,
                         product)
    index = torch.zeros(batch * time, dtype=torch.int32, device=inputs.device)  # padding reads row 0, unused
    index[positions] = torch.arange(len(positions), dtype=torch.int32, device=inputs.device)
    rows = torch.reshape(inputs, (batch * time, -1))[positions][None]
    return lstm_scan(rows, lengths, initial_c, initial_h, input_kernel, recurrent_kernel, bias, projection_kernel,
                     cell_clip, proj_clip, go_backwards, torch.reshape(index, (batch, time)), input_matmul_dtype,
                     recurrence, product)


FAST_CALLS = {"unique_tokens": unique_tokens, "char_cnn": char_cnn, "highway": highway,
              "projected_lstm": projected_lstm}
