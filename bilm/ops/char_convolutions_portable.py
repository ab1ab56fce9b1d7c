"""The char CNN's convolutions and max-pool in `keras.ops`: the portable reference of
`bilm.ops.char_convolutions` (TensorFlow's table loop), on every backend; and the columns of char-id rows they
must read (`needed_columns`)."""
import numpy as np
from keras import ops


def portable_char_convolutions(char_ids, char_embedding, kernels):
    """Each filter bank's valid convolution over a token's characters, max-pooled over the positions.

    Args:
        char_ids: int `(n_tokens, max_chars)`.
        char_embedding: float32 `(n_characters, embedding_dim)`.
        kernels: a list of float32 `(width, embedding_dim, num)`.

    Returns:
        float32 `(n_tokens, sum of num)`: for each filter the maximum over
        the `max_chars - width + 1` positions (padding included), before
        bias and activation, as the original computes it.
    """
    embedded = ops.take(char_embedding, ops.cast(char_ids, "int32"), axis=0)  # (n_tokens, max_chars, dim)
    pooled = [ops.max(ops.conv(embedded, kernel, strides=1, padding="valid"), axis=1) for kernel in kernels]
    return ops.concatenate(pooled, axis=-1)


def needed_columns(rows, widest_filter):
    """How many leading columns of the char-id rows `rows` (int `(n, width)`, NumPy) the char CNN must read to
    give every row's features: each row ends in a run of one id (the padding char, or 0 for a padding row), a
    window inside the run has one value per row and filter, and the first such window ends `widest_filter`
    columns past the row's content; at most `width`."""
    if len(rows) == 0:
        return min(rows.shape[1], widest_filter)
    content = np.where(rows != rows[:, -1:], np.arange(1, rows.shape[1] + 1), 0).max(axis=1)
    return min(int(content.max()) + widest_filter, rows.shape[1])
