"""The layers' calls of JAX's own (`bilm.backend.fast_layer_call`): `UniqueTokens`'s distinct rows inside a
function traced for a known bound on their number (`distinct_tokens_at_most`: a training step on one CPU);
everywhere else, and for every other layer, the portable `keras.ops` code.

A program JAX compiles has shapes fixed when it is traced, and the number of distinct tokens of a batch depends
on its ids: the caller counts them before it calls (NumPy, on the host), picks one of a few bounds above the count
(`distinct_tokens_bound`) and traces one program per bound.
"""
import contextlib
import threading

import jax.numpy as jnp
import numpy as np

from bilm.backend.jax.inference import padded_length

_BOUND = threading.local()


def distinct_tokens_bound(char_ids, devices):
    """A bound on the distinct rows of the int arrays `char_ids` (each `(..., width)`, NumPy) together: their
    count rounded up to one of a few values (`padded_length`'s), so that batches share few programs; None (every
    row encoded) unless `devices` is one CPU. On a GPU a step compiles for tens of seconds, which each new bound
    would cost again, and the saving is not measured there; with several devices each encodes its own rows."""
    if len(devices) != 1 or devices[0].platform != "cpu":
        return None
    flat = np.concatenate([np.reshape(ids, (-1, ids.shape[-1])) for ids in char_ids]).astype(np.int32)
    rows = np.ascontiguousarray(flat).view(np.dtype((np.void, flat.shape[1] * flat.itemsize))).ravel()
    return min(padded_length(len(np.unique(rows))), len(rows))


@contextlib.contextmanager
def distinct_tokens_at_most(bound):
    """Within the block (this thread; where a function is traced), `UniqueTokens` gives its distinct rows, at most
    `bound` of them: a bound the caller knows holds (`distinct_tokens_bound` of the same ids), since rows past it
    would be dropped. None: every row stands for itself, as outside the block."""
    previous = getattr(_BOUND, "value", None)
    _BOUND.value = bound
    try:
        yield
    finally:
        _BOUND.value = previous


def unique_tokens(layer, char_ids):
    """`UniqueTokens`'s distinct rows (ascending; then zero rows up to the bound) and each position's index,
    within `distinct_tokens_at_most`; elsewhere the layer's portable rows."""
    bound = getattr(_BOUND, "value", None)
    if bound is None:
        return layer.every_row(char_ids)
    rows = jnp.concatenate([jnp.reshape(ids, (-1, ids.shape[2])) for ids in char_ids])
    unique, index = jnp.unique(rows, axis=0, size=bound, fill_value=0, return_inverse=True)
    index = jnp.reshape(index, (-1,)).astype("int32")
    indices, start = [], 0
    for ids in char_ids:
        count = ids.shape[0] * ids.shape[1]
        indices.append(jnp.reshape(index[start:start + count], ids.shape[:2]))
        start += count
    return unique[None], indices


FAST_CALLS = {"unique_tokens": unique_tokens}
