"""Old public names kept working: renamed arguments and attributes, each warning once per use.

`renamed_argument` resolves a keyword argument that has a new name;
`deprecated_alias` is a read-only property under an attribute's old name;
`warn_deprecated` warns of any other old name. Each warns with a
`DeprecationWarning` that names the new name, pointing at the caller's line.
"""
import importlib
import sys
import warnings

from bilm.errors import UserError

# Libraries that read every attribute in `dir(obj)` (Keras' saving walks
# them to lay out .keras files; TensorFlow's SavedModel export looks for
# functions): an old name they reach is not a use of it, so it does not warn.
_ATTRIBUTE_WALKERS = ("keras", "tensorflow")


def renamed_argument(new_name, new_value, old_name, old_value, default):
    """The value of the argument `new_name`, also given under its old name `old_name`.

    Call it where the arguments are first checked, with both keywords
    defaulting to None, and pass the result on under the new name.

    Returns:
        `new_value`, else `old_value` (with a `DeprecationWarning` at the
        first caller outside bilm), else `default`.

    Raises:
        UserError: both names were given.
    """
    if old_value is None:
        return default if new_value is None else new_value
    if new_value is not None:
        raise UserError(f"{old_name}= is the old name of {new_name}=; pass {new_name}= only. "
                        f"Received: {new_name}={new_value!r}, {old_name}={old_value!r}")
    warn_deprecated(f"{old_name}= is deprecated; pass {new_name}={old_value!r} instead.")
    return old_value


def deprecated_alias(old_name, new_name):
    """A read-only property `old_name` that returns `self.<new_name>` with a `DeprecationWarning`.

    Keras' and TensorFlow's attribute walks (saving) read it without a
    warning; as the property sorts where the old attribute did, Keras'
    saving still lays a network out under the old name (see
    `bilm.models.elmo_embedding`).
    """
    def read(self):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.split(".")[0] not in _ATTRIBUTE_WALKERS:
            warnings.warn(f"{type(self).__name__}.{old_name} is deprecated; use .{new_name} instead.",
                          DeprecationWarning, stacklevel=2)
        return getattr(self, new_name)

    return property(read, doc=f"Deprecated: the old name of `{new_name}`.")


def warn_deprecated(message):
    """A `DeprecationWarning` with `message`, pointing at the first caller outside bilm (a user's line)."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "bilm":
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def alias_earlier_module(old_name, new_name):
    """Makes the module `old_name`, being imported (called from its own body), the module `new_name` itself,
    with a `DeprecationWarning` naming the new path: code written for a module's earlier place keeps running,
    on the same module object (its names, and what a test patches on it)."""
    warn_deprecated(f"{old_name} is deprecated; import {new_name} (the same module, moved).")
    sys.modules[old_name] = importlib.import_module(new_name)
