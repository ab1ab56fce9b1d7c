"""Deprecated path of `bilm.training.tensorflow.tf_dataset`, the same module."""
from bilm.utils.deprecation import alias_earlier_module

alias_earlier_module(__name__, "bilm.training.tensorflow.tf_dataset")
