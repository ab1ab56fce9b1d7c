"""Deprecated path of `bilm.training.arrays.evaluation`, the same module."""
from bilm.utils.deprecation import alias_earlier_module

alias_earlier_module(__name__, "bilm.training.arrays.evaluation")
