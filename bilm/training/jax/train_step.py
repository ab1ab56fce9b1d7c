"""Deprecated path of `bilm.training.arrays.train_step`, the same module."""
from bilm.training.jax import earlier_path

earlier_path("train_step")
