"""ends_at_exit (of the tests' TensorFlow reference): a process that leaves a make_tf_dataset iterator half-read
still exits."""
import os
import subprocess
import sys

import pytest

from helpers import ROOT, write_vocab
from training_helpers import TOKENS

# A script that keeps a half-read iterator in a global while the prefetch
# thread is inside a (slow) call of the generator, then ends.
HALF_READ_SCRIPT = """
import sys, time
from tensorflow_reference.tf_dataset import make_tf_dataset
from bilm.training.data.lm_dataset import LMDataset, load_vocab

class SlowDataset(LMDataset):
    def iter_batches(self, batch_size, num_steps, skip=0):
        for batch in super().iter_batches(batch_size, num_steps, skip):
            time.sleep(0.5)
            yield batch

batches = iter(make_tf_dataset(SlowDataset(sys.argv[1], load_vocab(sys.argv[2]), seed=0), 2, 3))
next(batches)
print("read a batch", flush=True)
"""


@pytest.mark.slow
def test_process_with_a_half_read_dataset_exits(tmp_path):
    """Without `ends_at_exit` the process hangs after its last line (the
    iterator's destructor waits for a generator call that can no longer
    take the GIL back)."""
    shard = tmp_path / "train.txt"
    shard.write_text("a b c d e\n" * 50)
    script = tmp_path / "half_read.py"
    script.write_text(HALF_READ_SCRIPT)
    path = os.pathsep.join(filter(None, [ROOT, os.path.join(ROOT, "tests"), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=path)
    try:
        result = subprocess.run([sys.executable, str(script), str(shard), write_vocab(tmp_path, TOKENS)],
                                env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"the process did not exit after its last line; it printed {timeout.stdout!r}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "read a batch"
