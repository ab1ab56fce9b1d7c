"""Shared setup for the usage examples: a tiny random biLM, a vocabulary, sentences."""
import atexit
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bilm.models import write_random_model  # noqa: E402
from bilm.presets import get_preset  # noqa: E402

CONTEXT = [
    "Pretrained biLMs compute representations useful for NLP tasks .".split(),
    "They give state of the art performance for many tasks .".split(),
]
QUESTION = [
    "What are biLMs useful for ?".split(),
]


def make_example(directory=None):
    """Writes a tiny random model, a vocabulary and a dataset file.

    Returns a dict of paths: `options_file`, `weight_file`, `vocab_file`,
    `dataset_file`, `directory`. Swap in a published model by pointing
    `options_file`/`weight_file` at its files instead. Without `directory`
    the files go to a temporary folder removed when the example ends.
    """
    if directory is None:
        directory = tempfile.mkdtemp(prefix="bilm_usage_")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
    options_file, weight_file = write_random_model(directory, get_preset("tiny"), seed=0)
    tokens = sorted({t for sentence in CONTEXT + QUESTION for t in sentence})
    vocab_file = os.path.join(directory, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        f.write("\n".join(["<S>", "</S>", "<UNK>"] + tokens) + "\n")
    dataset_file = os.path.join(directory, "dataset.txt")
    with open(dataset_file, "w", encoding="utf-8") as f:
        for sentence in CONTEXT + QUESTION:
            f.write(" ".join(sentence) + "\n")
    return {"options_file": options_file, "weight_file": weight_file, "vocab_file": vocab_file,
            "dataset_file": dataset_file, "directory": directory}
