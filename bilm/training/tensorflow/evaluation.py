"""Deprecated path of `bilm.training.run.evaluation` (`evaluate`, `test`), the same module."""
from bilm.utils.deprecation import alias_earlier_module

alias_earlier_module(__name__, "bilm.training.run.evaluation")
