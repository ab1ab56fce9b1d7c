"""Deprecated: the array trainer's earlier folder, named for JAX though PyTorch trains with it too. Each module
`bilm.training.jax.<name>` is `bilm.training.arrays.<name>`, the same module object (`earlier_path`)."""
import importlib
import sys

from bilm.utils.deprecation import warn_deprecated


def earlier_path(name):
    """Makes the module `bilm.training.jax.<name>`, being imported, the module `bilm.training.arrays.<name>`
    (with a `DeprecationWarning` naming the new path)."""
    warn_deprecated(f"bilm.training.jax.{name} is deprecated; import bilm.training.arrays.{name} (the same "
                    "module: the array trainer, on JAX and PyTorch).")
    sys.modules[f"{__name__}.{name}"] = importlib.import_module(f"bilm.training.arrays.{name}")
