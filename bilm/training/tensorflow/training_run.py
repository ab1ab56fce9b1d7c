"""Deprecated path of `bilm.training.arrays.training_run`, the same module: TensorFlow trains with the array step
as every backend does (one replica, or a `tf.distribute` strategy's replicas)."""
from bilm.utils.deprecation import alias_earlier_module

alias_earlier_module(__name__, "bilm.training.arrays.training_run")
