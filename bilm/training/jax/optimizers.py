"""Deprecated path of `bilm.training.arrays.optimizers`, the same module."""
from bilm.training.jax import earlier_path

earlier_path("optimizers")
