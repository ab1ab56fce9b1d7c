"""Stateless random numbers on JAX for the training step: seeds as TensorFlow's stateless ops take them
(int `(2,)`), turned into JAX keys (threefry), so that a step is a pure function of its seed there too.

The numbers are JAX's, not TensorFlow's Philox: the same seed drops other
units on the two backends (each repeats itself exactly).
"""
import jax
import jax.numpy as jnp


def key(seed):
    """The JAX key (threefry2x32) whose two words are the int `(2,)` `seed`'s low 32 bits."""
    return jax.random.wrap_key_data(jnp.asarray(seed).astype(jnp.uint32), impl="threefry2x32")


def fold_in(seed, data):
    """A new int `(2,)` seed (uint32 words) from `seed` and the integer `data`."""
    return jax.random.key_data(jax.random.fold_in(key(seed), data))


def dropout(x, rate, seed):
    """`x / (1 - rate)` where a uniform draw of the shape of `x` is at least `rate`, else 0 (a Python float
    `rate` in `[0, 1)`)."""
    if rate == 0:
        return x
    keep = jax.random.uniform(key(seed), x.shape, x.dtype) >= rate
    return jnp.where(keep, x * (1.0 / (1.0 - rate)), jnp.zeros_like(x))
