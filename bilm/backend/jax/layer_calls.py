"""The layers' calls of JAX's own (`bilm.backend.fast_layer_call`): inside a function traced for known bounds on a
batch's distinct tokens (`distinct_tokens_at_most`: a training step on one CPU), `UniqueTokens`'s distinct rows and
the char CNN over only the columns those rows' characters reach, each window a matrix product (`char_convolutions`);
at inference on a CPU the char CNN by TensorFlow's table loop; everywhere else, and for every other layer, the
portable `keras.ops` code.

A program JAX compiles has shapes fixed when it is traced, and the number of distinct tokens of a batch depends
on its ids: the caller counts them before it calls (NumPy, on the host), picks one of a few bounds above the count
(`distinct_tokens_bound`) and traces one program per bound. Columns: each row of char ids ends in a run of one id
(the padding char, or 0 for a padding row), and a window inside that run has one value per row and filter, so the
columns past the longest row's content and one window's width add nothing to the max over windows.
"""
import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np

from bilm.backend.jax.char_convolutions import table_loop_char_convolutions, window_product_char_convolutions
from bilm.backend.jax.column_kernels import column_product, kept_transpose
from bilm.backend.jax.inference import padded_length
from bilm.backend.jax.lstm_bptt import runs_in_columns
from bilm.backend.jax.lstm_column_steps import lstm_scan_in_columns
from bilm.backend.jax.lstm_input_steps import lstm_scan_inputs_in_steps
from bilm.backend.jax.lstm_native_steps import lstm_scan_native, native_steps_available, native_steps_pay
from bilm.ops.char_convolutions_portable import needed_columns
from bilm.ops.lstm_scan import lstm_scan
from bilm.utils.thread_flag import ThreadValue

_BOUND = ThreadValue()
# At inference, calls of at least this many tokens run the table loop: below it the tables, made in each call,
# cost more than the convolutions they spare (docs/performance.md).
TABLE_LOOP_ROWS = 64


class DistinctTokens(collections.namedtuple("DistinctTokens", ["rows", "columns"])):
    """Static bounds on a batch's distinct tokens: at most `rows` of them, whose characters (and one window of
    the char CNN's widest filter past them) lie within the first `columns` columns (None: every column)."""

    def serves(self, other):
        """Whether a step traced for these bounds serves a batch that needs `other`."""
        return self.rows >= other.rows and (self.columns is None or (
            other.columns is not None and self.columns >= other.columns))

    def union(self, other):
        """The least bounds that serve both `self` and `other`."""
        columns = None if self.columns is None or other.columns is None else max(self.columns, other.columns)
        return DistinctTokens(max(self.rows, other.rows), columns)


def distinct_tokens_bound(char_ids, devices, widest_filter=None):
    """`DistinctTokens` of the int arrays `char_ids` (each `(..., width)`, NumPy) together: their distinct rows'
    count, and the columns of the longest row's content plus `widest_filter` (None: every column, as for rows
    that carry more than characters), each rounded up to one of a few values (`padded_length`'s), so that
    batches share few programs; None (every row encoded whole) unless `devices` is one CPU. On a GPU a step
    compiles for tens of seconds, which each new bound would cost again, and the saving is not measured there;
    with several devices each encodes its own rows."""
    if len(devices) != 1 or devices[0].platform != "cpu":
        return None
    flat = np.concatenate([np.reshape(ids, (-1, ids.shape[-1])) for ids in char_ids]).astype(np.int32)
    rows = np.ascontiguousarray(flat).view(np.dtype((np.void, flat.shape[1] * flat.itemsize))).ravel()
    distinct, first = np.unique(rows, return_index=True)
    width, columns = flat.shape[1], None
    if widest_filter is not None:
        columns = min(padded_length(needed_columns(flat[first], widest_filter)), width)
        columns = None if columns == width else columns
    return DistinctTokens(min(padded_length(len(distinct)), len(rows)), columns)


def distinct_tokens_at_most(bound):
    """Within the block (this thread; where a function is traced), `UniqueTokens` gives its distinct rows, at most
    `bound.rows` of them, and the char CNN reads `bound.columns`: bounds the caller knows hold (a
    `distinct_tokens_bound` of the same ids), since rows past them would be dropped. None: every row stands for
    itself, as outside the block."""
    return _BOUND.holding(bound)


def unique_tokens(layer, char_ids):
    """`UniqueTokens`'s distinct rows (ascending; then zero rows up to the bound) and each position's index,
    within `distinct_tokens_at_most`; elsewhere the layer's portable rows."""
    bound = _BOUND.get()
    if bound is None:
        return layer.every_row(char_ids)
    rows = jnp.concatenate([jnp.reshape(ids, (-1, ids.shape[2])) for ids in char_ids])
    unique, index = jnp.unique(rows, axis=0, size=bound.rows, fill_value=0, return_inverse=True)
    index = jnp.reshape(index, (-1,)).astype("int32")
    indices, start = [], 0
    for ids in char_ids:
        count = ids.shape[0] * ids.shape[1]
        indices.append(jnp.reshape(index[start:start + count], ids.shape[:2]))
        start += count
    return unique[None], indices


def char_cnn(layer, flat_ids, direct_up_to=0):
    """`CharCNNEncoder`'s features of `flat_ids` `(n, width)`: within `distinct_tokens_at_most` (a training step on
    one CPU) over the columns of the bound, with each window as a matrix product
    (`window_product_char_convolutions`); at inference on a CPU (`direct_up_to` above 0: the layer's call has
    `training=False`) of at least `TABLE_LOOP_ROWS` tokens by the table loop (`table_loop_char_convolutions`);
    elsewhere the portable code. The same values to float32 round-off."""
    bound = _BOUND.get()
    if bound is None:
        if (direct_up_to > 0 and _known(flat_ids.shape[0]) and flat_ids.shape[0] >= TABLE_LOOP_ROWS
                and jax.default_backend() == "cpu"):
            return layer.portable_features(flat_ids, convolutions=table_loop_char_convolutions)
        return layer.portable_features(flat_ids)
    if bound.columns is not None:
        flat_ids = flat_ids[:, :bound.columns]
    return layer.portable_features(flat_ids, convolutions=window_product_char_convolutions)


def highway(layer, inputs, training):
    """`Highway.call`: at inference, each product of few rows in columns where the inference call gave its
    kernel's transpose (`bilm.backend.jax.column_kernels`); elsewhere the portable products. The same values to
    float32 round-off."""
    portable = layer.portable_product(training)

    def product(x, kernel):
        columns = None if training else column_product(x, kernel)
        return portable(x, kernel) if columns is None else columns

    return layer.portable_layers(inputs, product)


def projected_lstm(layer, inputs, lengths, initial_state, training, token_index):
    """`ProjectedLSTM.call`: at inference on a CPU, batches of a few rows or more (`native_steps_pay`) by bilm's
    native recurrence (`lstm_native_steps`); where it cannot be built, batches whose steps run in columns
    (`lstm_bptt.runs_in_columns`: a few rows over large kernels) over the kernels' kept transposes
    (`lstm_column_steps`), and other batches, one sentence a call among them, each step's input half in the step
    (`lstm_input_steps.lstm_scan_inputs_in_steps`); elsewhere the portable code. The same values to float32
    round-off."""
    batch = (inputs if token_index is None else token_index).shape[0]
    inference = not training and jax.default_backend() == "cpu" and _known(batch)
    if inference and _native_steps_run(layer, batch):
        return layer.portable_call(inputs, lengths, initial_state, training, token_index, lstm_scan_native)
    if inference and runs_in_columns(batch, layer.recurrent_kernel.shape):
        transposes = [None if kernel is None else kept_transpose(kernel)
                      for kernel in (layer.recurrent_kernel, layer.projection_kernel)]
        if transposes[0] is not None and (layer.projection_kernel is None or transposes[1] is not None):
            return layer.portable_call(inputs, lengths, initial_state, training, token_index,
                                       functools.partial(lstm_scan_in_columns, transposes=transposes))
    return layer.portable_call(inputs, lengths, initial_state, training, token_index,
                               lstm_scan_inputs_in_steps if inference else lstm_scan)


def _known(size):
    """Whether an array's `size` is a number: Keras traces a layer's output spec with symbolic sizes
    (`jax.export`'s), which no path's choice can compare; there the portable code gives the shapes."""
    return isinstance(size, int)


def _native_steps_run(layer, batch):
    """Whether `projected_lstm` runs `layer`'s steps of `batch` rows natively at inference on a CPU."""
    return native_steps_pay(batch) and native_steps_available(layer.recurrent_kernel, layer.projection_kernel)


def reads_transposes(layer, batches):
    """Whether an inference call on a CPU whose inputs have `batches` rows (the leading sizes of its arrays) may
    read the kept transposes of `layer`'s `column_kernels()` (`bilm.backend.jax.column_kernels`): an LSTM's (a layer
    with a `recurrent_kernel`, `ProjectedLSTM`) only where its steps run in columns (`projected_lstm`: a few rows, no
    native steps), any other layer's (a highway's products of a few new words) always. A layer whose transposes
    were not given takes its other path."""
    if getattr(layer, "recurrent_kernel", None) is None:
        return True
    return any(runs_in_columns(batch, layer.recurrent_kernel.shape) and not _native_steps_run(layer, batch)
               for batch in batches)


FAST_CALLS = {"unique_tokens": unique_tokens, "char_cnn": char_cnn, "highway": highway,
              "projected_lstm": projected_lstm}
