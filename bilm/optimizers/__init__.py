"""The optimizers training can use, one module each, and the registry that lists them.

Every `Optimizer` subclass defined in a module of this package is registered
under its `name` when the package is imported: adding an optimizer is adding
one module (and its test). The registry is what the `optimizer` training
key, `--optimizer`, the default learning rates, the memory estimate and a
restart's check of a checkpoint's optimizer read.
"""
import importlib
import pkgutil

from bilm.optimizers.base import Optimizer
from bilm.options import OptionsError


def _discover():
    optimizers = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Optimizer) and value.name is not None
                    and value.__module__ == module.__name__):
                if value.name in optimizers:
                    raise RuntimeError(f"Two optimizers are named {value.name!r}: {optimizers[value.name]} and "
                                       f"{value}.")
                optimizers[value.name] = value
    return optimizers


# The optimizer bilm-tf trained with, whose state its checkpoints hold.
ORIGINAL_RECIPE = "adagrad"
# {name: Optimizer subclass}, the original recipe's first.
OPTIMIZERS = dict(sorted(_discover().items(), key=lambda item: item[0] != ORIGINAL_RECIPE))


def optimizer_class(name, source="options"):
    """The `Optimizer` subclass registered as `name`; `OptionsError` naming the choices otherwise."""
    if name not in OPTIMIZERS:
        raise OptionsError(f"{source}: training key 'optimizer' must be one of {sorted(OPTIMIZERS)}, got "
                           f"{name!r} (\"adagrad\" is the original recipe's).")
    return OPTIMIZERS[name]


def default_learning_rates():
    """`{optimizer name: its default learning rate}`."""
    return {name: optimizer.default_learning_rate for name, optimizer in OPTIMIZERS.items()}


def checkpoint_optimizer(checkpoint_keys):
    """The name of the optimizer whose state a checkpoint holds, from its keys (`checkpoint_signature`)."""
    signed = [name for name, optimizer in OPTIMIZERS.items()
              if optimizer.checkpoint_signature is not None and optimizer.checkpoint_signature in checkpoint_keys]
    if signed:
        return signed[0]
    return next(name for name, optimizer in OPTIMIZERS.items() if optimizer.checkpoint_signature is None)


__all__ = ["OPTIMIZERS", "ORIGINAL_RECIPE", "Optimizer", "checkpoint_optimizer", "default_learning_rates",
           "optimizer_class"]
