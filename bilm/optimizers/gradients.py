"""What every optimizer does to gradients first: deduplicated sparse rows, global-norm clipping, scaling."""
from bilm.utils.lazy_tensorflow import tf


def deduplicate(gradient):
    """Sums the rows of an `IndexedSlices` that share an index (dense: unchanged).

    While a function compiled with XLA is traced, whose shapes cannot
    depend on the indices, the result keeps the number of rows it was
    given: the distinct indices (ascending) with their sums, then rows of
    zeros at index `dense_shape[0]`, past the end. XLA skips a scatter
    to such a row and clamps a gather from it, so the optimizers' sparse
    updates leave every variable as the sums alone would.
    """
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    from bilm.ops.placement import compiling_with_xla

    if compiling_with_xla():
        return _deduplicate_in_place(gradient)
    unique, positions = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, gradient.dense_shape)


def _deduplicate_in_place(gradient):
    """`deduplicate` with the shapes of `gradient` (see there): a stable
    sort of the indices puts equal ones together, in their order."""
    indices = gradient.indices
    n = tf.shape(indices)[0]
    order = tf.argsort(indices, stable=True)
    ascending = tf.gather(indices, order)
    first = tf.concat([[True], ascending[1:] != ascending[:-1]], axis=0)
    slot = tf.cumsum(tf.cast(first, tf.int32)) - 1
    values = tf.math.unsorted_segment_sum(tf.gather(gradient.values, order), slot, n)
    past_the_end = tf.fill([n], tf.cast(gradient.dense_shape[0], indices.dtype))
    # Equal indices write the same value to their slot.
    unique = tf.tensor_scatter_nd_update(past_the_end, slot[:, tf.newaxis], ascending)
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
