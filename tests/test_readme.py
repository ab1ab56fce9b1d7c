"""The README tells a new user the commands that CI runs, and its Keras example runs."""
import os
import re

from helpers import ROOT, write_model


def _read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def test_ci_runs_exactly_the_readme_install_and_test_commands():
    readme = _read("README.md")
    commands = re.findall(r"^((?:python -m )?pip install .*|python -m pytest .*)$", readme, re.MULTILINE)
    install = [c for c in commands if "pip install" in c]
    test = [c for c in commands if "pytest" in c]
    assert install and test, "the README shows no install or test command"
    assert "[test]" in install[0], "the README's install command must bring pytest (the [test] extra)"
    ci_commands = [line.strip() for line in _read(".ci", "run").splitlines()]
    for command in set(commands):
        assert command in ci_commands, f".ci/run does not run the README's command: {command}"


def _python_block(section):
    """The first ```python block under the README heading `section`."""
    readme = _read("README.md")
    start = readme.index(f"\n## {section}\n")
    return re.search(r"```python\n(.*?)```", readme[start:], re.DOTALL).group(1)


def test_the_keras_example_runs_as_written(tmp_path, monkeypatch):
    write_model(tmp_path)  # options.json and weights.hdf5, the names the example uses
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(_python_block("ELMo inside a Keras model"), "README.md", "exec"), namespace)
    assert namespace["tags"].shape == (2, 3, 3)
