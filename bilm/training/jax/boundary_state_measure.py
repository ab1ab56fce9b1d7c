"""Deprecated path of `bilm.training.arrays.boundary_state_measure`, the same module."""
from bilm.training.jax import earlier_path

earlier_path("boundary_state_measure")
