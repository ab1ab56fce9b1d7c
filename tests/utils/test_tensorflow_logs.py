"""In a command, TF_CPP_MIN_LOG_LEVEL also covers what TensorFlow logs while it loads; scripts print no noise."""
import os
import subprocess
import sys

import pytest

from bilm.utils.tensorflow_logs import filter_records
from helpers import ROOT

LOAD_TIME_LOG = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795468764.562684    4359 port.cc:153] oneDNN custom operations are on.\n"
    b"I0000 00:00:1795468764.622174    4359 cpu_feature_guard.cc:227] This TensorFlow binary is optimized.\n"
    b"To enable the following instructions: AVX2 AVX512F FMA, rebuild TensorFlow.\n"
    b"W0000 00:00:1795468764.7    4359 some.cc:1] a warning\n"
    b"E0000 00:00:1795468764.8    4359 cuda_platform.cc:52] failed call to cuInit\n"
    b"Traceback (most recent call last): an unrelated line\n"
)


@pytest.mark.parametrize("level, kept", [
    (0, [0, 1, 2, 3, 4, 5, 6]),
    (1, [0, 4, 5, 6]),  # the notice is a warning
    (2, [5, 6]),
    (3, []),
])
def test_records_below_the_level_are_dropped_with_their_continuation_lines(level, kept):
    lines = LOAD_TIME_LOG.splitlines(keepends=True)
    assert filter_records(LOAD_TIME_LOG, level) == b"".join(lines[i] for i in kept)


def _run(args, **env):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | env)


@pytest.mark.slow
def test_a_script_prints_only_its_usage_and_a_command_honours_the_level():
    result = _run(["bin/elmo.py", "--help"])
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: elmo.py")
    quiet = _run(["-c", "import bilm"], TF_CPP_MIN_LOG_LEVEL="2", BILM_COMMAND="1")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
