"""The char CNN's convolutions and max-pool as XLA on a CPU runs them fastest. To train: each filter bank's windows
as one matrix product, and a max-pool whose gradient goes to one window per token and filter (the maximising one),
as TensorFlow's table loop gives it (`bilm.ops.char_convolutions`). For inference: TensorFlow's table loop itself
(`table_loop_char_convolutions`), each window a sum of table rows, no multiply-adds.

XLA runs a convolution's forward and backward passes on a CPU as Eigen convolutions, and a matrix product through
its faster matmul library; and JAX's own gradient of a max keeps a float32 mask of every window, where the
maximising window's index is all the gradient needs. Where a maximum is reached by several windows (the run of
padding chars that ends each row), those windows are identical, so any one stands for all: the same gradient.
"""
import functools

import jax
import jax.numpy as jnp
from keras import ops


def window_product_char_convolutions(char_ids, char_embedding, kernels):
    """`bilm.ops.char_convolutions_portable.portable_char_convolutions`'s values (to float32 round-off) and
    gradient, for a training step on a CPU.

    Args:
        char_ids: int `(n_tokens, max_chars)`.
        char_embedding: float32 `(n_characters, embedding_dim)`.
        kernels: a list of float32 `(width, embedding_dim, num)`.

    Returns:
        float32 `(n_tokens, sum of num)`: each filter's maximum over the windows, before bias and activation.
    """
    embedded = ops.take(char_embedding, ops.cast(char_ids, "int32"), axis=0)  # (n_tokens, max_chars, dim)
    pooled = []
    for kernel in kernels:
        width, dim, num = kernel.shape
        windows = embedded.shape[1] - width + 1
        # Window p's chars side by side, (n_tokens, windows, width * dim): column k * dim + c is char p + k's c.
        stacked = ops.concatenate([embedded[:, k:k + windows] for k in range(width)], axis=-1)
        pooled.append(_max_over_windows(ops.matmul(stacked, ops.reshape(kernel, (width * dim, num))), windows))
    return ops.concatenate(pooled, axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _max_over_windows(values, windows):
    """`max(values, axis=1)` of `(n, windows, num)`; its gradient reaches the first maximising window alone."""
    return jnp.max(values, axis=1)


def _max_forward(values, windows):
    return jnp.max(values, axis=1), jnp.argmax(values, axis=1).astype(jnp.int32)


def _max_backward(windows, argmax, gradient):
    chosen = jnp.arange(windows, dtype=jnp.int32)[None, :, None] == argmax[:, None, :]
    return (jnp.where(chosen, gradient[:, None, :], jnp.zeros((), gradient.dtype)),)


_max_over_windows.defvjp(_max_forward, _max_backward)


def table_loop_char_convolutions(char_ids, char_embedding, kernels):
    """`bilm.ops.char_convolutions_portable.portable_char_convolutions`'s values (to float32 round-off), for
    inference on a CPU, by TensorFlow's table loop (`bilm.ops.char_convolutions`): a filter's value at window p
    is `sum_k T_k[char_ids[:, p + k]]` with `T_k = char_embedding @ kernel[k]`, the rows added in the order of
    the offsets, and a loop over the windows keeps the running max. A token's values depend on its own ids
    alone: the same bytes at any number of tokens beside it. Arguments and result as
    `window_product_char_convolutions`'."""
    char_ids = char_ids.astype(jnp.int32)
    n_tokens, columns = char_ids.shape
    pooled = []
    for kernel in kernels:
        width, dim, num = kernel.shape
        # (n_characters, width, num): row c, offset k holds the embedding's row c times the kernel's offset k.
        table = jnp.reshape(char_embedding @ jnp.reshape(jnp.transpose(kernel, (1, 0, 2)), (dim, width * num)),
                            (-1, width, num))

        def window_max(p, best, table=table, width=width):
            window = table[jax.lax.dynamic_index_in_dim(char_ids, p, 1, keepdims=False), 0]
            for k in range(1, width):
                window = window + table[jax.lax.dynamic_index_in_dim(char_ids, p + k, 1, keepdims=False), k]
            return jnp.maximum(best, window)

        pooled.append(jax.lax.fori_loop(0, columns - width + 1, window_max,
                                        jnp.full((n_tokens, num), -jnp.inf, jnp.float32)))
    return jnp.concatenate(pooled, axis=-1)
