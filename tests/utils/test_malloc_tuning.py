"""keep_freed_memory: memory freed by one step is reused by the next without page faults."""
import json
import subprocess
import sys

import bilm.utils.malloc_tuning as malloc_tuning

# Run in a fresh process: glibc's settings are process-wide (and adapt to
# what the process has freed so far), and this test process has run other
# tests. The module is loaded by path so that TensorFlow is not imported.
SCRIPT = r"""
import importlib.util, json, resource, sys, threading
import numpy as np
spec = importlib.util.spec_from_file_location("malloc_tuning", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
applied = module.keep_freed_memory() if sys.argv[2] == "tuned" else None
result = {"applied": applied}

def steps():
    # Like a training step's tensors: blocks of a few to 30 MiB, allocated
    # and freed over and over, in a thread other than the main one (as
    # TensorFlow's ops run).
    sizes = [int(mib * 2 ** 20) // 8 for mib in (3, 20, 9, 30, 5, 12)]
    for size in sizes:
        np.ones(size)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(10):
        for size in sizes:
            np.ones(size)
    result["page_faults"] = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before

thread = threading.Thread(target=steps)
thread.start()
thread.join()
print(json.dumps(result))
"""


def _page_faults(mode):
    output = subprocess.run([sys.executable, "-c", SCRIPT, malloc_tuning.__file__, mode],
                            check=True, capture_output=True, text=True).stdout
    return json.loads(output.splitlines()[-1])


def test_reallocations_fault_no_pages_once_freed_memory_is_kept():
    if malloc_tuning._glibc_mallopt() is None:
        # Not Linux with glibc: the settings do not exist and nothing is changed.
        assert malloc_tuning.keep_freed_memory() is False
        return
    default = _page_faults("default")
    tuned = _page_faults("tuned")
    # Without the settings glibc hands blocks back and faults them in again
    # (about 1000 pages here); otherwise this test would prove nothing.
    assert default["page_faults"] > 500, default
    assert tuned["applied"] is True
    assert tuned["page_faults"] < 50, tuned


def test_keep_freed_memory_can_be_called_again():
    # In a process of its own: the settings would otherwise stay in the test process.
    script = ("import json, sys, importlib.util\n"
              "spec = importlib.util.spec_from_file_location('malloc_tuning', sys.argv[1])\n"
              "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
              "first = m.keep_freed_memory(); second = m.keep_freed_memory()\n"
              "print(json.dumps([first, second, m._glibc_mallopt() is not None]))\n")
    output = subprocess.run([sys.executable, "-c", script, malloc_tuning.__file__], check=True,
                            capture_output=True, text=True).stdout
    first, second, has_mallopt = json.loads(output.splitlines()[-1])
    assert second == first
    assert first == has_mallopt
