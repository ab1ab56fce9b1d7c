"""The package's shape: lower layers never import higher ones, and examples use only the public surface."""
import ast
import importlib
import os
import re

import pytest

from helpers import ROOT

PUBLIC_MODULES = {"bilm", "bilm.text", "bilm.ops", "bilm.layers", "bilm.models", "bilm.io", "bilm.export",
                  "bilm.training", "bilm.beam", "bilm.compat", "bilm.compat.simple_elmo",
                  "bilm.compat.elmoformanylangs", "bilm.compat.allennlp", "bilm.compat.tf_hub",
                  "bilm.options", "bilm.presets", "bilm.errors", "bilm.commands"}
# What each part of the package may import from the others (beyond bilm.errors, which
# every part may raise, and bilm.utils).
ALLOWED = {
    "errors": set(),
    "utils": set(),
    "text": set(),
    "ops": set(),
    "backend": {"ops"},
    "io": {"text"},
    "options": {"io", "text"},
    "optimizers": {"options", "ops"},
    "presets": {"io", "options", "optimizers"},
    "layers": {"backend", "ops"},
    "models": {"backend", "layers", "ops", "io", "text", "options"},
    "export": {"models", "io", "text", "ops", "options"},
    "elmo": {"export", "models", "io", "text", "options"},
    "pretrained": {"elmo", "models", "io"},
    "training": {"backend", "models", "layers", "ops", "io", "text", "options", "optimizers", "presets"},
    "commands": {"backend", "export", "training", "models", "io", "ops", "optimizers", "options", "presets", "text"},
    "compat": {"pretrained", "models", "io", "text", "options", "layers"},
    "beam": {"pretrained", "commands", "export", "models", "io", "ops", "text", "options"},
    "__init__": {"export", "layers", "models", "options", "pretrained", "text"},
    "__main__": {"commands"},
}
# A backend's own code for a higher part stands in the backend's folder at that part's level, as Keras's
# backend trainers (`keras/src/backend/<name>/trainer.py`) stand at its trainers'.
LEVEL_OF = {"bilm.backend.tensorflow.language_model_calls": "models"}


def _imported_modules(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _part(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_each_part_imports_only_the_parts_below_it():
    wrong = []
    for directory, _, files in os.walk(os.path.join(ROOT, "bilm")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            source = LEVEL_OF.get(relative) or _part(
                relative if not relative.endswith(".__init__") or relative.count(".") > 1 else "bilm")
            for module in _imported_modules(path):
                if not module.startswith("bilm.") or module.startswith(("bilm.errors", "bilm.utils")):
                    continue
                target = _part(module)
                if target != source and target not in ALLOWED[source]:
                    wrong.append(f"{os.path.relpath(path, ROOT)} imports {module}")
    assert wrong == []


def test_file_formats_never_import_model_sources():
    # bilm.io holds two kinds of module: file formats, and where models come from (built on the formats).
    formats = os.path.join(ROOT, "bilm", "io", "formats")
    wrong = [f"{name} imports {module}" for name in sorted(os.listdir(formats)) if name.endswith(".py")
             for module in _imported_modules(os.path.join(formats, name)) if module.startswith("bilm.io.sources")]
    assert wrong == []
    assert sorted(name for name in os.listdir(os.path.join(ROOT, "bilm", "io")) if name.endswith(".py")) == [
        "__init__.py"]


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_every_exported_name_exists(module):
    imported = importlib.import_module(module)
    for name in getattr(imported, "__all__", []):
        assert hasattr(imported, name), f"{module}.{name}"


def _readme_code():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def private_imports(where, code):
    """`"<where>: <module>"` for each module of bilm that Python `code` imports and that is not public."""
    found = []
    for node in ast.walk(ast.parse(code)):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        found += [f"{where}: {name}" for name in names if name.split(".")[0] == "bilm" and name not in PUBLIC_MODULES]
    return found


def test_examples_the_scripts_and_the_readme_use_only_the_public_surface():
    sources = {os.path.join(folder, name): open(os.path.join(ROOT, folder, name), encoding="utf-8").read()
               for folder in ("usage", "bin") for name in os.listdir(os.path.join(ROOT, folder))
               if name.endswith(".py")}
    sources.update({f"README.md block {i}": code for i, code in enumerate(_readme_code())})
    assert [line for where, code in sources.items() for line in private_imports(where, code)] == []
