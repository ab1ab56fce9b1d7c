"""Deprecated path of `bilm.backend.tensorflow.distribution`, the same module."""
from bilm.utils.deprecation import alias_earlier_module

alias_earlier_module(__name__, "bilm.backend.tensorflow.distribution")
