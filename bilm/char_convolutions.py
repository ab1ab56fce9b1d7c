"""The char CNN's convolutions and max-pool as one op with a sparse gradient.

Each filter's output is the max over positions of a valid 1-D convolution
of the embedded characters, so its gradient reaches one window per token
and filter: the window at the maximum. The window is a handful of char
ids, and a window's gradient lands on the embedding rows of those chars, so
both gradients are sums over `(char id, filter)` buckets

    M_k[c, f] = sum over tokens n with char c at position argmax[n, f] + k of g[n, f]
    d_kernel[k] = embedding^T M_k        d_embedding = sum_k M_k kernel[k]^T

computed with one `bincount` per filter width, instead of the two dense
backward convolutions (as many multiply-adds as the forward pass each).
"""
import tensorflow as tf


def max_pooled_char_convolutions(char_ids, embedding, kernels):
    """`concat_i(max_t conv1d(gather(embedding, char_ids), kernels[i])[:, t])`.

    Args:
        char_ids: int `(n_tokens, max_chars)`.
        embedding: float `(n_characters, dim)` tensor (read a variable first).
        kernels: float tensors `(width_i, dim, num_i)`, valid convolutions.

    Returns:
        float `(n_tokens, sum(num_i))`, no bias or activation. The gradient
        reaches `embedding` and `kernels` (not `char_ids`); where a maximum
        is reached by several identical windows (padding), any one stands
        for all, which is exact since their gradients are equal.
    """
    char_ids = tf.cast(char_ids, tf.int32)
    # TF's convolutions mis-shape a zero-size input, so no tokens skips them.
    return tf.cond(
        tf.shape(char_ids)[0] > 0,
        lambda: _max_pooled(char_ids, embedding, *kernels),
        lambda: tf.zeros([0, sum(kernel.shape[2] for kernel in kernels)], embedding.dtype))


@tf.custom_gradient
def _max_pooled(char_ids, embedding, *kernels):
    embedded = tf.gather(embedding, char_ids)
    convolutions = [tf.nn.conv1d(embedded, kernel, stride=1, padding="VALID") for kernel in kernels]
    maxima = [tf.reduce_max(convolution, axis=1) for convolution in convolutions]

    def grad(d_pooled):
        d_kernels, d_embedding = [], tf.zeros_like(embedding)
        d_maxima = tf.split(d_pooled, [kernel.shape[2] for kernel in kernels], axis=1)
        for convolution, maximum, kernel, g in zip(convolutions, maxima, kernels, d_maxima):
            buckets = _window_buckets(char_ids, convolution, maximum, g, kernel.shape[0], embedding.shape[0])
            d_kernels.append(tf.einsum("cd,kcf->kdf", embedding, buckets))
            d_embedding += tf.einsum("kcf,kdf->cd", buckets, kernel)
        return (None, d_embedding, *d_kernels)

    return tf.concat(maxima, axis=1), grad


def _window_buckets(char_ids, convolution, maximum, g, width, n_characters):
    """`M (width, n_characters, num)`: `M[k, c, f]` sums `g[n, f]` over the
    tokens whose maximising window for filter f has char c at offset k.

    Args:
        char_ids: int32 `(n, max_chars)`.
        convolution: `(n, max_chars - width + 1, num)`; maximum: `(n, num)`
            its max over positions; g: `(n, num)` the max's gradient.
    """
    num = convolution.shape[2]
    length = tf.shape(convolution)[1]
    positions = tf.range(length)[:, tf.newaxis]
    argmax = tf.reduce_max(tf.where(tf.equal(convolution, maximum[:, tf.newaxis]), positions, -1), axis=1)
    # A window's char ids, packed several to an int64, are gathered at the
    # argmax once per pack rather than once per offset.
    bits = max(1, (n_characters - 1).bit_length())
    per_pack = 63 // bits
    ids = tf.cast(char_ids, tf.int64)
    column = tf.range(num, dtype=tf.int64)
    bins = []
    for first in range(0, width, per_pack):
        offsets = range(first, min(first + per_pack, width))
        packed = tf.add_n([tf.bitwise.left_shift(ids[:, k:k + length], bits * (k - first)) for k in offsets])
        packed = tf.gather(packed, argmax, batch_dims=1)  # (n, num)
        for k in offsets:
            char = tf.bitwise.bitwise_and(tf.bitwise.right_shift(packed, bits * (k - first)), (1 << bits) - 1)
            bins.append((k * n_characters + char) * num + column)
    size = width * n_characters * num
    weights = tf.reshape(tf.tile(g[tf.newaxis], [width, 1, 1]), [-1])
    sums = tf.math.bincount(tf.reshape(tf.stack(bins), [-1]), weights=weights, minlength=size, maxlength=size)
    return tf.reshape(sums, [width, n_characters, num])
