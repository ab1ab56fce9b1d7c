"""`import bilm` changes nothing process-wide: no exit hook, no environment change."""
import subprocess
import sys

from helpers import ROOT

SCRIPT = """
import atexit, os
import h5py, keras, numpy, tensorflow
before = (atexit._ncallbacks(), dict(os.environ))
import bilm, bilm.training
print(atexit._ncallbacks() - before[0], dict(os.environ) == before[1])
"""


def test_importing_bilm_registers_no_exit_hook_and_changes_no_setting():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0", "True"]
