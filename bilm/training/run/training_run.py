"""Deprecated path of `bilm.training.arrays.training_run`, the same module."""
from bilm.utils.deprecation import alias_earlier_module

alias_earlier_module(__name__, "bilm.training.arrays.training_run")
