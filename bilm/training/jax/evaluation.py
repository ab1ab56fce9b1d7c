"""Deprecated path of `bilm.training.arrays.evaluation`, the same module."""
from bilm.training.jax import earlier_path

earlier_path("evaluation")
