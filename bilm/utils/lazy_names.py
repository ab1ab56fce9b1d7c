"""A package's public names, each imported from its module when first used (PEP 562)."""
import importlib

from bilm.utils.backend import require_tensorflow


def lazy_names(package, modules, tensorflow_only=(), submodules=()):
    """`(__getattr__, __dir__)` for the package named `package` whose public names are the keys of `modules`
    (`{name: module under the package}`): a name's module is imported when the name is first read, so that
    importing the package imports none of them (TensorFlow's fast paths stay unloaded on other backends).
    Reading a name of `tensorflow_only` while Keras runs on another backend is one `UserError` that says so.
    A name of `submodules` is the package's submodule of that name, imported when first read (`import bilm`,
    then `bilm.training`)."""

    def __getattr__(name):
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if name in tensorflow_only:
            require_tensorflow(f"{package}.{name}")
        return getattr(importlib.import_module(f"{package}.{modules[name]}"), name)

    def __dir__():
        return sorted({*modules, *submodules})

    return __getattr__, __dir__
