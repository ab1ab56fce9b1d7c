"""The README tells a new user the commands that CI runs, and the commands and examples of the README and
the docs run as written (each block where it is written in full, once)."""
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

import bilm
import warm_python
from bilm.models import write_random_model
from bilm.presets import get_preset, training_options
from helpers import ROOT, TESTS
from training_helpers import cycle_sentences


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


def _block(page, section, language):
    """The first ```language block under the heading `section` (of any level) of `page` (README.md, docs/...)."""
    text = _read(page)
    start = re.search(rf"^#+ {re.escape(section)}\n", text, re.MULTILINE).start()
    return re.search(rf"```{language}\n(.*?)```", text[start:], re.DOTALL).group(1)


def _python_block(page, section):
    return _block(page, section, "python")


KERAS_EXAMPLE = """
import sys
sys.path.insert(0, sys.argv[2])
from helpers import write_model
write_model(__import__("pathlib").Path("."))
exec(compile(open(sys.argv[1]).read(), "README.md", "exec"))
print(tags.shape)
"""


@pytest.mark.slow
def test_the_keras_example_runs_as_written_and_no_tensorflow_warning_names_bilms_graphs(tmp_path):
    """The example gives its tags; TensorFlow's own log, at every level: none of its warnings names a node of
    bilm's (the char CNN's `tf.cond` made its type inference warn, 'an invalid graph', when the frozen biLM's
    tables kept their custom gradient's tensors)."""
    (tmp_path / "example.py").write_text(_python_block("README.md", "ELMo inside a Keras model"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    result = subprocess.run([sys.executable, "-c", KERAS_EXAMPLE, str(tmp_path / "example.py"), str(TESTS)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("(2, 3, 3)"), result.stderr[-3000:]
    assert "Type inference failed" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if re.match(r"[WE]\d{4} ", line)]
    assert not [line for line in warnings if re.search(r"bilm|el_mo_embedding|char_cnn", line)], warnings


def _bash_commands(page, section):
    """The commands of the first ```bash block under the heading `section` of `page`."""
    block = _block(page, section, "bash")
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _write_corpus(directory):
    """`directory/train/part0.txt` and `directory/heldout/part0.txt`, as the docs' commands expect."""
    for folder, n, seed in (("train", 300, 0), ("heldout", 40, 1)):
        (directory / folder).mkdir(parents=True)
        (directory / folder / "part0.txt").write_text("\n".join(cycle_sentences(n, seed)) + "\n")


def _run_bash_commands(page, section, cwd, replace=()):
    """Runs the `python bin/...` commands of a section of `page` in `cwd`; returns each one's stdout + stderr.

    `replace`: `(old, new)` pairs applied to each command first (each `old` must occur in the section).
    """
    outputs = []
    commands = _bash_commands(page, section)
    for old, new in replace:
        assert any(old in command for command in commands), old
        commands = [command.replace(old, new) for command in commands]
    for command in commands:
        assert command.startswith("python bin/"), command
        # Quoted as the shell reads it, without the shell: the commands use no more of it than quotes.
        assert not set("$`|&;<>*?") & set(re.sub(r"'[^']*'", "", command)), command
        _, script, *flags = shlex.split(command)
        result = warm_python.run([sys.executable, os.path.join(ROOT, script), *flags], cwd=cwd, capture_output=True,
                                 text=True, timeout=900)
        assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
        outputs.append(result.stdout + result.stderr)
    return outputs



def test_the_readmes_training_commands_are_the_docs_tested_ones():
    assert _bash_commands("README.md", "Train or adapt a biLM") == _bash_commands(
        "docs/training.md", "Train a biLM on your corpus")

@pytest.mark.slow
def test_the_training_commands_and_python_example_run_as_written(tmp_path, monkeypatch):
    _write_corpus(tmp_path / "data")
    # At the tiny size: the commands and flags as written, without the small
    # model's minutes of matmuls on the test machine.
    (tmp_path / "tiny.json").write_text(json.dumps(training_options("tiny")))
    outputs = _run_bash_commands("docs/training.md", "Train a biLM on your corpus", tmp_path,
                                 replace=[("--size small", "--options_file tiny.json")])
    perplexity = float(re.search(r"AVERAGE PERPLEXITY = ([\d.]+)", "".join(outputs)).group(1))
    assert 1 < perplexity < 1000
    assert (tmp_path / "weights.hdf5").is_file() and (tmp_path / "weights_options.json").is_file()
    monkeypatch.chdir(tmp_path)
    namespace = {}
    example = _python_block("docs/training.md", "From Python")
    assert 'training_options("small"' in example
    exec(compile(example.replace('training_options("small"', 'training_options("tiny"'), "docs/training.md", "exec"),
         namespace)
    assert namespace["result"]["step"] >= 1 and os.path.isfile(namespace["result"]["checkpoint"])


@pytest.mark.slow
def test_the_adaptation_commands_run_as_written(tmp_path):
    _write_corpus(tmp_path / "domain")
    write_random_model(tmp_path / "elmo_model", get_preset("tiny"), seed=0)  # the "published" model
    outputs = _run_bash_commands("docs/adaptation.md", "The commands", tmp_path)
    assert "elmo_model" in outputs[1]
    perplexity = float(re.search(r"AVERAGE PERPLEXITY = ([\d.]+)", "".join(outputs)).group(1))
    assert 1 < perplexity < 1000
    adapted = bilm.load(tmp_path / "adapted_model")
    published = bilm.load(tmp_path / "elmo_model", start="zeros")  # a random model has no boundary state
    vectors, before = adapted.embed(["alpha bravo"]), published.embed(["alpha bravo"])
    assert vectors[0].shape == before[0].shape == (2, 32)
    assert not np.allclose(vectors[0], before[0])  # the adapted weights moved
