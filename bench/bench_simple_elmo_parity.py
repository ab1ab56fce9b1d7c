#!/usr/bin/env python
"""bilm.compat.simple_elmo against simple_elmo's own `ElmoModel` (0.9.2), on the same weights and real sentences.

Fetches simple_elmo's wheel and tf_keras's once (`pip download --no-deps`):
simple_elmo builds TensorFlow 1 graphs of `tf.compat.v1.nn.rnn_cell` cells,
which today's TensorFlow runs only with its legacy Keras
(`TF_USE_LEGACY_KERAS=1`, tf_keras on the path), so the original runs in a
process of its own (`smart_open`, which it uses only to open files, stood
in for by Python's `open`). Both load the same random model of `--size`
(`bilm.models.random_weights`, as an NLPL folder: `options.json` and
`model.hdf5`) and embed the first `--sentences` GCIDE sentences
(bench/real_text.py) with `max_batch_size` `--batch_size` (both stateful,
after a warm-up, as simple_elmo is); the script prints the largest
difference of `get_elmo_vectors` for each `layers` and of
`get_elmo_vector_average`.

    python bench/bench_simple_elmo_parity.py --size small --sentences 48
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from common import random_model  # noqa: E402
from real_text import spread_sentences, wheel_folder, write_sentences  # noqa: E402

PACKAGES = {"simple_elmo": "simple_elmo==0.9.2", "tf_keras": "tf_keras"}
ORIGINAL = """
import builtins, sys, types
sys.modules["smart_open"] = types.SimpleNamespace(open=builtins.open)
import numpy as np
from simple_elmo import ElmoModel
folder, sentences_file, batch_size, out = sys.argv[1:5]
sentences = [line.split() for line in open(sentences_file, encoding="utf-8")]
model = ElmoModel()
model.load(folder, max_batch_size=int(batch_size))
results = {layers: model.get_elmo_vectors(sentences, layers=layers) for layers in ("average", "top", "all")}
results["vector_average"] = model.get_elmo_vector_average(sentences)
np.savez(out, **results)
"""


def main():
    args = harness.parser(__doc__, size="small", sentences=48, batch_size=16,
                          cache_dir=os.path.join(tempfile.gettempdir(), "bilm_simple_elmo_parity")).parse_args()
    import numpy as np

    from bilm.compat.simple_elmo import ElmoModel

    paths = [wheel_folder(args.cache_dir, requirement, name) for name, requirement in PACKAGES.items()]
    folder = random_model(args.cache_dir, args.size, weights="model.hdf5")
    sentences = spread_sentences(args.sentences, max_tokens=30)
    sentences_file = os.path.join(args.cache_dir, f"sentences-{args.sentences}.txt")
    write_sentences(sentences_file, sentences)
    out = os.path.join(args.cache_dir, "original.npz")
    environment = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
                   "PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", ORIGINAL, folder, sentences_file, str(args.batch_size), out], check=True,
                   env=environment, stdout=subprocess.DEVNULL)
    original = np.load(out)
    model = ElmoModel()
    model.load(folder, max_batch_size=args.batch_size)
    print(f"{args.size} size, {len(sentences)} GCIDE sentences, max_batch_size {args.batch_size}; largest "
          "|difference| from simple_elmo's own:")
    for layers in ("average", "top", "all"):
        ours = model.get_elmo_vectors(sentences, layers=layers)
        print(f"  get_elmo_vectors(layers={layers!r}): {float(np.abs(ours - original[layers]).max()):.2e} "
              f"(shapes {ours.shape} and {original[layers].shape}; mean |value| {float(np.abs(ours).mean()):.3f})")
    ours = model.get_elmo_vector_average(sentences)
    print(f"  get_elmo_vector_average: {float(np.abs(ours - original['vector_average']).max()):.2e}")


if __name__ == "__main__":
    main()
