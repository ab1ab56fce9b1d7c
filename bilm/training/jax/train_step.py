"""Deprecated path of `bilm.training.arrays.train_step`, the same module."""
from bilm.utils.deprecation import alias_earlier_module

alias_earlier_module(__name__, "bilm.training.arrays.train_step")
