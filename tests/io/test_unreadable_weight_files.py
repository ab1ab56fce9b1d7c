"""A weight file that is not readable HDF5 (truncated, random bytes) is named in the error on every loading path."""
import os
import re
import sys

import pytest

import bilm
import warm_python
from bilm.io.formats.weight_file import WeightFileError, read_boundary_state
from helpers import ROOT, write_model

UNREADABLE = r" is not a readable HDF5 weight file \(.*\); it may be truncated or corrupt"


@pytest.fixture(params=["truncated", "random bytes"])
def unreadable_model(request, tmp_path):
    """A model directory whose `weights.hdf5` is not readable HDF5; returns (directory, options, weights)."""
    options_file, weight_file, _ = write_model(tmp_path)
    with open(weight_file, "rb") as f:
        data = f.read()
    with open(weight_file, "wb") as f:
        f.write(data[:len(data) // 2] if request.param == "truncated" else os.urandom(len(data)))
    return tmp_path, options_file, weight_file


def test_reading_the_boundary_state_names_the_file(unreadable_model):
    _, _, weight_file = unreadable_model
    with pytest.raises(WeightFileError, match=f"^{re.escape(weight_file)}{UNREADABLE}"):
        read_boundary_state(weight_file)


def test_load_names_the_file(unreadable_model):
    directory, _, weight_file = unreadable_model
    with pytest.raises(WeightFileError, match=f"^{re.escape(weight_file)}{UNREADABLE}"):
        bilm.load(directory)


@pytest.mark.slow
def test_bin_elmo_names_the_file(unreadable_model):
    directory, _, weight_file = unreadable_model
    (directory / "in.txt").write_text("a b\n")
    result = warm_python.run([sys.executable, "bin/elmo.py", str(directory / "in.txt"), str(directory / "out.hdf5"),
                             "--model", str(directory)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env=dict(os.environ))
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"Error: {weight_file} is not a readable HDF5 weight file ("), result.stderr[-2000:]
    assert "it may be truncated or corrupt" in last_line
