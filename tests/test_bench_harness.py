"""bench/harness.py: the benches share one command line. Each shared flag is defined once (no bench adds one
itself, and no bench builds a parser of its own), the sizes are bilm's presets, and `per_config` runs a
measurement in a process of its own per configuration, with the user's flags."""
import ast
import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, BENCH)
    try:
        import harness
    finally:
        sys.path.remove(BENCH)
    return harness


def _calls(path):
    """`(line, call's dotted name, its first string argument or None)` of every call in the file."""
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            yield node.lineno, name, first


def test_no_bench_defines_a_shared_flag_or_a_parser_of_its_own(harness):
    scripts = sorted(glob.glob(os.path.join(BENCH, "*.py")))
    assert len(scripts) > 20
    found = []
    for path in scripts:
        if path.endswith("harness.py"):
            continue
        for line, name, first in _calls(path):
            where = f"{os.path.relpath(path, ROOT)}:{line}"
            if name.endswith("add_argument") and isinstance(first, str) and first.lstrip("-") in harness.FLAGS:
                found.append(f"{where} defines {first}")
            if name.endswith("ArgumentParser"):
                found.append(f"{where} builds a parser of its own")
    assert not found, "\n".join(found)


def test_the_sizes_are_bilm_presets(harness):
    from bilm.presets import get_preset

    for size in harness.SIZES:
        assert get_preset(size)["lstm"]["dim"] > 0
    with pytest.raises(Exception):
        get_preset("not-a-size")


def test_a_parser_takes_only_shared_flags_with_their_meaning_and_this_benchs_defaults(harness, capsys):
    command = harness.parser("doc", size="small", batch_sizes=[1, 32], backends=["jax"], steps=None,
                             work_dir=harness.REQUIRED, overwrite=True)
    args = command.parse_args(["--work_dir", "w", "--batch_sizes", "32,1,32", "--backends", "torch,jax,torch"])
    assert (args.size, args.batch_sizes, args.backends, args.steps, args.overwrite) == (
        "small", [1, 32], ["torch", "jax"], None, False)
    with pytest.raises(SystemExit):
        command.parse_args([])  # --work_dir is required
    assert "--work_dir" in capsys.readouterr().err
    for bad in (["--size", "huge"], ["--backends", "mxnet"], ["--batch_sizes", "0"], ["--sentences", "3"]):
        with pytest.raises(SystemExit):
            command.parse_args(["--work_dir", "w", *bad])
    with pytest.raises(ValueError, match="not shared flags: rows"):
        harness.parser("doc", rows=3)


def test_a_report_is_refused_over_an_existing_file_and_written_whole(harness, tmp_path):
    report = tmp_path / "report.json"
    report.write_text("the user's")
    with pytest.raises(SystemExit, match="exists; pass --overwrite"):
        harness.check_output(str(report), overwrite=False)
    with pytest.raises(SystemExit, match="appeared while the bench ran"):
        harness.write_report({"a": 1}, str(report), overwrite=False)
    assert report.read_text() == "the user's"
    harness.write_report({"a": 1}, str(report), overwrite=True)
    assert json.loads(report.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["report.json"]
    with pytest.raises(SystemExit, match="is not a directory"):
        harness.check_output(str(tmp_path / "missing" / "report.json"), overwrite=False)


MEASURE = '''
import os, sys
sys.path.insert(0, {bench!r})
import harness

def measure(config, args):
    return {{"config": config, "pid": os.getpid(), "sentences": args.sentences, "batch_size": args.batch_size,
             "extra": args.extra}}

def extend(parser):
    parser.add_argument("--extra", default="no")

for config, result, args in harness.per_config(__file__, measure, "doc", sizes=["tiny"], sentences=5,
                                               batch_size=2, extend=extend):
    print("RESULT", config, result["pid"] != os.getpid(), result["sentences"], result["batch_size"],
          result["extra"])
'''


def test_per_config_measures_each_configuration_in_a_process_of_its_own_with_the_users_flags(tmp_path):
    script = tmp_path / "bench_toy.py"
    script.write_text(MEASURE.format(bench=BENCH))
    done = subprocess.run([sys.executable, str(script), "--sizes", "tiny,small:bulk", "--sentences", "7",
                           "--extra", "yes"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: "), lines
    assert lines[1:] == ["RESULT tiny True 7 2 yes", "RESULT small:bulk True 7 2 yes"]


@pytest.mark.slow
def test_the_start_up_bench_times_a_training_runs_phases_through_the_one_loop():
    # On PyTorch, the backend whose first step compiles nothing: the bench patches the loop every backend runs.
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, os.path.join(BENCH, "bench_start_up.py"), "--what", "training",
                           "--backends", "torch", "--steps", "2", "--repeats", "1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    line = done.stdout.splitlines()[-1]
    assert line.startswith("training, torch, 2 steps: imported "), line
    for phase in ("set up", "first step", "other steps", "after steps", "of which the boundary state"):
        assert f"{phase} " in line, (phase, line)


def test_a_bench_and_the_processes_it_starts_import_the_bilm_of_its_own_checkout(tmp_path):
    # Another bilm ahead of it on the path, as an editable install of another checkout is.
    (tmp_path / "bilm").mkdir()
    (tmp_path / "bilm" / "__init__.py").write_text("")
    (tmp_path / "elsewhere").mkdir()
    where = "import importlib.util; print(importlib.util.find_spec('bilm').origin)"  # found, not imported
    code = (f"import subprocess, sys; sys.path.insert(0, sys.argv[1]); import harness; {where}; "
            f"print(subprocess.run([sys.executable, '-c', {where!r}], capture_output=True, text=True, "
            "cwd=sys.argv[2]).stdout.strip())")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", code, BENCH, str(tmp_path / "elsewhere")], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path / "elsewhere"), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = os.path.join(ROOT, "bilm", "__init__.py")
    assert done.stdout.split() == [expected, expected]
