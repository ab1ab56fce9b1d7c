"""The `bilm` command (`python -m bilm`, and the `bilm` entry point pip installs): a subcommand per script of
bin/, each with that script's flags; one line and status 2 for a wrong command line."""
import os
import sys
from importlib import metadata

import pytest

import warm_python
from bilm.commands import cli
from bilm.commands.subcommands import SUBCOMMANDS
from bilm.commands.training_arguments import script_command
from helpers import ROOT

ENV = dict(os.environ)


def _bilm(*args, cwd, env=None):
    return warm_python.run([sys.executable, "-m", "bilm", *args], cwd=cwd, env={**ENV, **(env or {})},
                           capture_output=True, text=True, timeout=300)


def test_the_entry_point_is_installed_and_names_every_bin_script():
    points = [point for point in metadata.entry_points(group="console_scripts") if point.name == "bilm"]
    assert [point.value for point in points] == ["bilm.commands.cli:main"]
    scripts = sorted(name for name in os.listdir(os.path.join(ROOT, "bin")) if name.endswith(".py"))
    assert sorted(script for _, script, _ in SUBCOMMANDS.values() if script) == scripts


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_subcommand_takes_its_scripts_flags_under_its_own_name(name, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main([name, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: bilm {name} ")
    assert "-h, --help" in out and len(out.splitlines()) > 3


@pytest.mark.slow
def test_a_run_from_any_folder(tmp_path):
    (tmp_path / "text.txt").write_text("the cat sat\nthe dog\n")
    done = _bilm("vocab", "--train_prefix", str(tmp_path / "text.txt"), "--vocab_file", str(tmp_path / "vocab.txt"),
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "vocab.txt").read_text().split() == ["<S>", "</S>", "<UNK>", "the", "cat", "dog", "sat"]


def test_help_version_and_a_wrong_or_missing_subcommand(capsys):
    """What `main` prints for the command lines that run no subcommand (in this process: the same `main` as the
    entry point's, which `test_a_run_from_any_folder` starts)."""
    cli.main(["--help"])
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in SUBCOMMANDS)
    cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"bilm {cli.version()}"
    with pytest.raises(SystemExit) as wrong:
        cli.main(["trian"])
    out, err = capsys.readouterr()
    assert wrong.value.code == 2 and out == ""
    assert err.splitlines() == [err.strip()] and "no subcommand 'trian'" in err
    with pytest.raises(SystemExit) as bare:
        cli.main([])
    assert bare.value.code == 2 and capsys.readouterr().err.startswith("usage: bilm SUBCOMMAND")


def test_the_command_that_continues_a_run_is_the_one_in_use(monkeypatch):
    monkeypatch.setitem(cli._running, "subcommand", "train")
    assert script_command("restart.py") == ["bilm", "restart"]
    monkeypatch.setitem(cli._running, "subcommand", None)
    assert script_command("restart.py")[-1].endswith("restart.py")


@pytest.mark.slow
def test_the_doctor_says_what_runs_here(tmp_path):
    done = _bilm("doctor", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == f"bilm {cli.version()}"
    assert lines[1].startswith("Keras ") and " on tensorflow, " in lines[1]
    assert lines[2].startswith("Backends installed: tensorflow ") and "KERAS_BACKEND=" in lines[2]
    assert lines[3].startswith("Devices: ") and "CPU" in lines[3]
    assert lines[4].startswith("Native kernels") and lines[5].startswith("Model cache: ")
    # On another backend it says what runs there: training too.
    done = _bilm("doctor", cwd=tmp_path, env={"KERAS_BACKEND": "torch"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("On torch: embedding, Keras models, training and the scripts run; SavedModel export, TF-Hub "
            "conversion and Apache Beam need TensorFlow.") in done.stdout.splitlines(), done.stdout
