"""What every optimizer does to gradients first: deduplicated sparse rows, global-norm clipping, scaling."""
import tensorflow as tf


def deduplicate(gradient):
    """Sums the rows of an `IndexedSlices` that share an index (dense: unchanged)."""
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    unique, positions = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, gradient.dense_shape)


def global_norm_scale(gradients, clip_norm, summed_over=1):
    """The factor of `tf.clip_by_global_norm` for gradients that may be sparse.

    Args:
        gradients: list of dense tensors, deduplicated `IndexedSlices`, or None.
        clip_norm: float.
        summed_over: the gradients are sums over this many replicas; the
            norm and the scale are those of their mean (which the scale
            includes, so no pass divides the gradients).

    Returns:
        `(scale, global norm)`, float scalars: the gradients times `scale`
        are their mean, clipped to a global norm of at most `clip_norm`.
        The norm of an `IndexedSlices` is that of its values (right once
        indices are unique). Each squared norm is one `l2_loss` (one pass,
        no temporary).
    """
    half_squares = [tf.nn.l2_loss(g.values if isinstance(g, tf.IndexedSlices) else g)
                    for g in gradients if g is not None]
    norm = tf.sqrt(2.0 * tf.add_n(half_squares)) / summed_over
    return clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm) / summed_over, norm


def scaled(gradient, scale):
    """`gradient * scale`, or zeros where `scale` is 0 (even for non-finite values)."""
    return tf.where(scale > 0, gradient * scale, tf.zeros_like(gradient))
