"""The char CNN's convolutions and max-pool as one op, built on table lookups.

The convolution's input is a char embedding, so a filter of width w sees
w char ids, and its output at position t is a sum of table rows:

    conv[n, t] = sum_k T_k[ids[n, t + k]]        T_k = embedding @ kernel[k]

with one small table `T_k (n_characters, num)` per offset (all of a
kernel's side by side: one matmul). A compiled loop over positions keeps
the running max, each step fusing the lookups and the sum: far fewer
operations than the convolution's multiply-adds.

The gradient goes through the max to one window per token and filter (the
maximising one), and a window's gradient lands on the table rows of its
chars, so both gradients are sums over `(char id, filter)` buckets

    M_k[c, f] = sum of g[n, f] over tokens n with char c at argmax[n, f] + k
    d_kernel[k] = embedding^T M_k        d_embedding = sum_k M_k kernel[k]^T

computed with one scatter-add and two matmuls per filter width, instead of
two dense backward convolutions. The compiled loop keeps the argmax beside
the running max, so the gradient needs no second pass over the windows.

Words are short and each row of char ids ends in a run of one id (the
padding char, or 0 for a padding row), so most windows lie inside that
run, and all of them have one value per row and filter: the window of
that id alone. Columns are kept only as far as the longest row's content
needs (rounded up to `COLUMN_STEP`, so that XLA compiles a few shapes),
and that one window stands in for all the dropped ones. The result is the
same as over every position.

A few tokens (a sentence's new words, at inference) take the same sums
without the compiled loop (`max_pooled_char_convolutions`' `direct_up_to`):
all their windows at once, each a sum of table rows in the order of its
offsets. No compilation for each new column count, and the same bytes as
the loop, so a token's encoding does not depend on how many tokens share
the call.
"""
import tensorflow as tf

from bilm.errors import UserError
from bilm.ops.batch_invariant import batch_invariant_matmul
from bilm.ops.placement import compiling_with_xla
from bilm.utils.thread_flag import ThreadFlag

_DIRECT_ONLY = ThreadFlag()


def direct_convolutions():
    """Within it (this thread), a call of `max_pooled_char_convolutions`
    with `direct_up_to` runs the direct convolutions whatever its number of
    tokens, and a function traced here holds no compiled loop (whose
    tracing costs more than a second). For callers that send few tokens
    at a time, such as an inference cache's new words."""
    return _DIRECT_ONLY.on()


def max_pooled_char_convolutions(char_ids, embedding, kernels, direct_up_to=0, differentiable=True):
    """`concat_i(max_t conv1d(gather(embedding, char_ids), kernels[i])[:, t])`.

    Args:
        char_ids: int `(n_tokens, max_chars)`.
        embedding: float `(n_characters, dim)` tensor (read a variable first).
        kernels: float tensors `(width_i, dim, num_i)`, valid convolutions.
        direct_up_to: a call with at most this many tokens takes the
            direct path (the table loop's sums without the loop: no
            compilation, the same outputs bit for bit; its gradient is
            TF's autodiff, not bit for bit the same on every run); 0 (the
            default): always the compiled table loop, whose gradient is
            reproducible (for training). Inside `direct_convolutions()`:
            the direct path for any number of tokens. While a function
            compiled with XLA is traced: the table loop.
        differentiable: False where no gradient will be asked of the
            result (frozen weights): the table loop then keeps nothing for
            a backward pass (inside `tf.cond` the kept tensors of its
            custom gradient made TensorFlow's type inference warn about the
            graph), and the result stops gradients.

    Returns:
        float `(n_tokens, sum(num_i))`, no bias or activation. The gradient
        reaches `embedding` and `kernels` (not `char_ids`); where a maximum
        is reached by several identical windows (padding), any one stands
        for all, which is exact since their gradients are equal.
    """
    char_ids = tf.cast(char_ids, tf.int32)
    # XLA's gathers clamp an out-of-range id to the last row instead of
    # failing, so a bad id would give a plausible wrong encoding.
    n_characters = embedding.shape[0]
    with tf.control_dependencies([
        tf.debugging.assert_non_negative(char_ids, message="char ids must be >= 0 (build them with Batcher)"),
        tf.debugging.assert_less(
            char_ids, n_characters,
            message=f"char ids must be < {n_characters}, the rows of the char embedding "
                    "(build them with Batcher; training options need n_characters 261, prediction 262)"),
    ]):
        char_ids = tf.identity(char_ids)
    if _DIRECT_ONLY.is_on() and direct_up_to:
        return _direct_max_pooled(char_ids, embedding, kernels)
    # Under XLA the branch below would compile both sides, and a custom
    # gradient inside a branch does not compile: the table loop alone.
    table_loop = _max_pooled if differentiable else _max_pooled_values
    if not direct_up_to or compiling_with_xla():
        pooled = table_loop(char_ids, embedding, *kernels)
    else:
        pooled = tf.cond(tf.shape(char_ids)[0] <= direct_up_to,
                         lambda: _direct_max_pooled(char_ids, embedding, kernels),
                         lambda: table_loop(char_ids, embedding, *kernels))
    return pooled if differentiable else tf.stop_gradient(pooled)


def _direct_max_pooled(char_ids, embedding, kernels):
    """`max_pooled_char_convolutions` by the table loop's arithmetic without
    its compiled loop: each window a sum of table rows in the order of its
    offsets, then the max over positions and the dropped windows' stand-in,
    as `_compiled_maxima` computes them, so a token's encoding is the same
    bytes by either path (`bilm.ops.batch_invariant`). It holds every
    window of the kept columns at once: for few tokens."""
    max_chars = tf.shape(char_ids)[1]
    columns = columns_to_keep(char_ids, max(kernel.shape[0] for kernel in kernels))
    # The tables' rows of the chars these tokens hold, not of all chars: a table row is an embedding row
    # times the kernel, by the product whose rows do not depend on how many rows share it
    # (`bilm.ops.batch_invariant`), so the same bytes as the whole table's.
    kept_ids = char_ids[:, :columns]
    n_kept = tf.size(kept_ids)
    chars, local = tf.unique(tf.concat([tf.reshape(kept_ids, [-1]), char_ids[:, -1]], axis=0))
    kept = tf.reshape(local[:n_kept], [-1, columns])
    fills = local[n_kept:]
    rows = tf.gather(embedding, chars)
    dropped = columns < max_chars
    maxima = []
    for kernel in kernels:
        table = _table(rows, kernel)
        width = table.shape[1]
        positions = columns - width + 1
        flat = tf.reshape(table, [-1, table.shape[2]])
        window = tf.gather(flat, kept[:, :positions] * width)
        for k in range(1, width):
            window = window + tf.gather(flat, kept[:, k:k + positions] * width + k)
        maximum = tf.reduce_max(window, axis=1)
        fill = _fill_window(fills, table)
        maxima.append(tf.where(dropped, tf.maximum(maximum, fill), maximum))
    return tf.concat(maxima, axis=1)


def _tables(embedding, kernels):
    """Each kernel's `T_k` side by side, `(table_rows, width, num)`: one matmul a kernel (see the module's
    docstring); rows past the embedding's are zeros that no id reaches."""
    n_characters = embedding.shape[0]
    table_rows = -(-n_characters // TABLE_ROW_STEP) * TABLE_ROW_STEP
    rows = tf.pad(embedding, [[0, table_rows - n_characters], [0, 0]])
    return [_table(rows, kernel) for kernel in kernels]


def _table(rows, kernel):
    """`(n, width, num)`: the table rows of embedding rows `(n, dim)` for a kernel `(width, dim, num)`, each
    the same bytes whatever the other rows (`bilm.ops.batch_invariant`), so that the table loop's whole
    tables and the direct path's rows of a few chars agree."""
    return tf.reshape(batch_invariant_matmul(rows, _flat_kernel(kernel)), [-1, kernel.shape[0], kernel.shape[2]])


# Tokens go through XLA in blocks of this many rows, and columns are kept
# in steps of COLUMN_STEP: a few compilations per model, whatever the
# number of tokens.
BLOCK_ROWS = 64
COLUMN_STEP = 8
# The tables' rows are the char embedding's rounded up to a multiple of
# this, so that training's 261 characters and prediction's 262 share one
# compiled loop (a training run measures its boundary state with both).
TABLE_ROW_STEP = 8


def columns_to_keep(char_ids, max_width):
    """int32 scalar: how many leading columns of `char_ids` `(n, max_chars)`
    hold every window that is not inside a row's trailing run of its last
    id, rounded up to a multiple of `COLUMN_STEP` and at most `max_chars`.
    The windows not kept (of width w, those starting after the count less
    w) all lie inside those runs.

    While a function compiled with XLA is traced: every column
    (`max_chars`), since XLA needs shapes that do not depend on the ids."""
    max_chars = tf.shape(char_ids)[1]
    if compiling_with_xla():
        return max_chars
    differs = tf.cast(tf.not_equal(char_ids, char_ids[:, -1:]), tf.int32)
    # One past the last position that differs from the row's last id.
    content = tf.reduce_max(differs * tf.range(1, max_chars + 1)[tf.newaxis], axis=1)
    needed = tf.maximum(tf.reduce_max(tf.concat([content, [0]], 0)) + max_width - 1, max_width)
    return tf.minimum((needed + COLUMN_STEP - 1) // COLUMN_STEP * COLUMN_STEP, max_chars)


def _max_pooled_values(char_ids, embedding, *kernels):
    """`_max_pooled`'s values alone (no gradient kept)."""
    return _max_pooled_with_gradient(char_ids, embedding, *kernels)[0]


@tf.custom_gradient
def _max_pooled(char_ids, embedding, *kernels):
    return _max_pooled_with_gradient(char_ids, embedding, *kernels)


def _max_pooled_with_gradient(char_ids, embedding, *kernels):
    """The table loop's maxima `(n_tokens, sum num)` and their gradient function (`tf.custom_gradient`'s
    pair)."""
    n, max_chars = tf.shape(char_ids)[0], tf.shape(char_ids)[1]
    widths = [kernel.shape[0] for kernel in kernels]
    nums = [kernel.shape[2] for kernel in kernels]
    n_characters = embedding.shape[0]
    table_rows = -(-n_characters // TABLE_ROW_STEP) * TABLE_ROW_STEP
    if max(w * num for w, num in zip(widths, nums)) * table_rows >= 2 ** 31:
        raise UserError(f"char CNN too large for int32 gradient bins: {n_characters} characters "
                         f"x filters {list(zip(widths, nums))}; use fewer characters or filters.")
    columns = columns_to_keep(char_ids, max(widths))
    # No tokens still makes one (padding) block, so that case needs no branch.
    n_blocks = tf.maximum((n + BLOCK_ROWS - 1) // BLOCK_ROWS, 1)
    padded = tf.pad(char_ids, [[0, n_blocks * BLOCK_ROWS - n], [0, 0]])
    blocks = tf.reshape(padded[:, :columns], [n_blocks, BLOCK_ROWS, columns])
    # Each row's last id: the dropped windows' stand-in.
    fills = tf.reshape(padded[:, -1], [n_blocks, BLOCK_ROWS])
    dropped = columns < max_chars
    # All T_k of a kernel as one table (table_rows, width, num): one matmul.
    # Rows past the embedding's are zeros that no id reaches.
    flat_kernels = [_flat_kernel(tf.stop_gradient(kernel)) for kernel in kernels]
    # Constants: the table loop's own gradient reaches `embedding` and `kernels`.
    tables = _tables(tf.stop_gradient(embedding), [tf.stop_gradient(kernel) for kernel in kernels])
    maxima, argmaxes = tf.map_fn(
        lambda block: _compiled_maxima(block[0], block[1], dropped, tables), (blocks, fills),
        fn_output_signature=(tf.TensorSpec([BLOCK_ROWS, sum(nums)], embedding.dtype),
                             tf.TensorSpec([BLOCK_ROWS, sum(nums)], tf.int32)))

    def grad(d_pooled):
        # Padding rows' windows add zeros.
        weights = tf.pad(d_pooled, [[0, n_blocks * BLOCK_ROWS - n], [0, 0]])
        all_buckets = _bucket_sums(tf.reshape(blocks, [-1, columns]), tf.reshape(fills, [-1]),
                                   tf.reshape(argmaxes, [-1, sum(nums)]), weights, tuple(widths), tuple(nums),
                                   table_rows)
        d_kernels, d_embedding = [], tf.zeros_like(embedding)
        for buckets, kernel, flat in zip(all_buckets, kernels, flat_kernels):
            width, num = kernel.shape[0], kernel.shape[2]
            # All M_k of the kernel, (n_characters, width * num); no id reaches the table's padding rows.
            buckets = tf.reshape(buckets, [table_rows, width * num])[:n_characters]
            d_flat = tf.matmul(embedding, buckets, transpose_a=True)  # (dim, width * num)
            d_kernels.append(tf.transpose(tf.reshape(d_flat, [-1, width, num]), [1, 0, 2]))
            d_embedding += tf.matmul(buckets, flat, transpose_b=True)
        return (None, d_embedding, *d_kernels)

    return tf.reshape(maxima, [-1, sum(nums)])[:n], grad


@tf.function(jit_compile=True, autograph=False)
def _bucket_sums(char_ids, fills, argmax, weights, widths, nums, table_rows):
    """Per kernel, float `(table_rows * width * num,)`: the buckets `M_k[c,
    f]` of the module docstring, laid out `(table_rows, width, num)`.

    Args:
        char_ids: int32 `(n, columns)`, the kept columns; fills: int32
            `(n,)`, each row's last id (the dropped windows' stand-in).
        argmax: int32 `(n, sum num)`, from `_compiled_maxima`: where each
            max was reached, -1 for the `fills` window.
        weights: float `(n, sum num)`, the gradient reaching each max.
        widths, nums: the kernels' widths and filter counts.

    Compiled, the scatter-add adds in input order, so the gradient is the
    same bit for bit on every run; `tf.math.bincount` with weights sums each
    thread's share apart and adds the shares in the order the threads end,
    which changed a training run's weights from one run to the next."""
    all_buckets = []
    for width, num, at, g in zip(widths, nums, tf.split(argmax, nums, axis=1), tf.split(weights, nums, axis=1)):
        offsets = tf.range(width)[:, tf.newaxis]  # (width, 1)
        # (n, width, num): the char at offset k of each maximising window.
        chars = tf.gather(char_ids, tf.maximum(at, 0)[:, tf.newaxis] + offsets, batch_dims=1)
        chars = tf.where(at[:, tf.newaxis] < 0, fills[:, tf.newaxis, tf.newaxis], chars)
        bins = (chars * width + offsets) * num + tf.range(num)
        every_offset = tf.broadcast_to(g[:, tf.newaxis], tf.shape(bins))  # each char of a window gets its gradient
        all_buckets.append(tf.math.unsorted_segment_sum(tf.reshape(every_offset, [-1]), tf.reshape(bins, [-1]),
                                                        table_rows * width * num))
    return all_buckets


def _flat_kernel(kernel):
    """`(dim, width * num)`: a kernel `(width, dim, num)` with its offsets
    side by side, so that `embedding @ it` holds every `T_k`."""
    return tf.reshape(tf.transpose(kernel, [1, 0, 2]), [kernel.shape[1], -1])


def _window(char_ids, table, position):
    """`(n, num)`: the convolution at one `position` (a scalar), as lookups
    in its table `(rows, width, num)`: one gather of the rows `id * width +
    k` of the table seen as `(rows * width, num)`, summed over k."""
    width = table.shape[1]
    ids = tf.slice(char_ids, [0, position], [-1, width]) * width + tf.range(width)
    return tf.reduce_sum(tf.gather(tf.reshape(table, [-1, table.shape[2]]), ids), axis=1)


def _fill_window(fills, table):
    """`(n, num)`: the window made of each row's `fills` id alone."""
    return _window(tf.tile(fills[:, tf.newaxis], [1, table.shape[1]]), table, 0)


# The compiled loop walks the positions in (n, num) steps: a max (or
# argmax) over a (n, positions, num) tensor of windows compiles, at up to 32
# positions, to one fused loop that is several times slower.

@tf.function(jit_compile=True, autograph=False)
def _compiled_maxima(char_ids, fills, dropped, tables):
    """`(maxima, argmax)`, each `(n, sum num)`: each convolution's max over
    positions of the kept columns `char_ids` and, where columns were
    `dropped`, of the `fills` window; and the last position reaching it
    (int32; -1 where that is the `fills` window), where its gradient goes."""
    maxima, argmaxes = [], []
    for t in tables:
        last = tf.shape(char_ids)[1] - t.shape[1]

        def step(p, maximum, argmax, t=t):
            window = _window(char_ids, t, p)
            return p + 1, tf.maximum(maximum, window), tf.where(window >= maximum, p, argmax)

        first = _window(char_ids, t, 0)
        _, maximum, argmax = tf.while_loop(lambda p, *_: p <= last, step,
                                           (1, first, tf.zeros(tf.shape(first), tf.int32)))
        fill = _fill_window(fills, t)
        maxima.append(tf.where(dropped, tf.maximum(maximum, fill), maximum))
        argmaxes.append(tf.where(tf.logical_and(dropped, fill >= maximum), -1, argmax))
    return tf.concat(maxima, axis=1), tf.concat(argmaxes, axis=1)
