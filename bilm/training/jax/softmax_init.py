"""Deprecated path of `bilm.training.arrays.softmax_init`, the same module."""
from bilm.training.jax import earlier_path

earlier_path("softmax_init")
