"""The char CNN's convolutions and max-pool in `keras.ops`: the portable reference of
`bilm.ops.char_convolutions` (TensorFlow's table loop), on every backend."""
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
