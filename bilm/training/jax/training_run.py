"""Deprecated path of `bilm.training.arrays.training_run`, the same module."""
from bilm.training.jax import earlier_path

earlier_path("training_run")
