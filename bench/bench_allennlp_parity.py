#!/usr/bin/env python
"""bilm.compat.allennlp against AllenNLP's own `Elmo` (2.10.1), on the same weights and real sentences.

Fetches AllenNLP's wheel once (`pip download allennlp==2.10.1 --no-deps`;
its own dependencies pin a PyTorch older than any that installs today), and
imports `allennlp.modules.elmo` from it with the packages that module never
calls (spaCy, transformers, cached_path, ...) stood in for by empty modules
where they are not installed. Then both run the same random model of
`--size` (`bilm.models.random_weights`, the original HDF5 layout, which both
read) on the first `--sentences` GCIDE sentences (bench/real_text.py), in
batches of `--batch_size`, and the script prints the largest difference of
their representations and masks for each setting: the default mix, layer
norm, kept boundaries, fixed mix parameters. AllenNLP's biLM carries each
batch row's LSTM states into the next batch and bilm's starts each sentence
from zeros: the first batch is the same computation, the later ones show
what the carried states change (a deliberate difference, docs/migrating.md).

    KERAS_BACKEND=torch python bench/bench_allennlp_parity.py --size small --sentences 64
"""
import importlib.abc
import importlib.machinery
import os
import sys
import tempfile
import types

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from common import model_files, random_model  # noqa: E402
from real_text import spread_sentences, wheel_folder  # noqa: E402

VERSION = "2.10.1"
# Imported by allennlp.modules.elmo's imports, never called by Elmo or batch_to_ids.
UNUSED = ("transformers", "spacy", "cached_path", "lmdb", "dill", "base58", "huggingface_hub", "tqdm", "nltk",
          "sentencepiece", "termcolor", "wandb", "fairscale", "torchvision", "jsonnet", "_jsonnet", "tensorboardX",
          "boto3", "botocore", "sqlitedict", "scipy", "sklearn", "more_itertools", "datasets")


class _Anything(type):
    """A stand-in class: any attribute, call or subscript of it is a stand-in too."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (object,), {})

    def __call__(cls, *args, **kwargs):
        return cls

    def __getitem__(cls, item):
        return cls


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Empty modules for the `UNUSED` packages that are not installed."""

    def __init__(self):
        self.stood_in = set()

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in UNUSED and (top in self.stood_in or importlib.machinery.PathFinder.find_spec(top) is None):
            self.stood_in.add(top)
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda name: _Anything(name, (object,), {})
        return module

    def exec_module(self, module):
        pass


def allennlp_elmo_module(cache_dir):
    """`allennlp.modules.elmo` of AllenNLP's wheel, fetched into `cache_dir` once."""
    source = wheel_folder(cache_dir, f"allennlp=={VERSION}", f"allennlp-{VERSION}")
    sys.path.insert(0, source)
    finder = _StandIns()
    sys.meta_path.insert(0, finder)
    import allennlp.modules.elmo as elmo_module
    import allennlp.modules.elmo_lstm as elmo_lstm

    # Local paths only: AllenNLP's downloader is one of the stand-ins.
    elmo_module.cached_path = elmo_lstm.cached_path = lambda path, **kwargs: path
    print(f"AllenNLP {VERSION} from its wheel; stood in for (not installed, not called): "
          f"{', '.join(sorted(finder.stood_in))}")
    return elmo_module


def main():
    args = harness.parser(__doc__, size="small", sentences=64, batch_size=16,
                          cache_dir=os.path.join(tempfile.gettempdir(), "bilm_allennlp_parity")).parse_args()
    import keras
    import numpy as np
    import torch

    if keras.backend.backend() != "torch":
        sys.exit("AllenNLP's Elmo is PyTorch's: run with KERAS_BACKEND=torch.")
    from bilm.compat import allennlp as compat

    original = allennlp_elmo_module(args.cache_dir)
    files = model_files(random_model(args.cache_dir, args.size))
    sentences = spread_sentences(args.sentences, max_tokens=30)
    batches = [sentences[i:i + args.batch_size] for i in range(0, len(sentences), args.batch_size)]
    same_ids = all(torch.equal(original.batch_to_ids(batch), compat.batch_to_ids(batch)) for batch in batches)
    print(f"{args.size} size, {len(sentences)} GCIDE sentences in batches of {args.batch_size}; batch_to_ids "
          f"{'identical' if same_ids else 'DIFFERENT'}")
    settings = {"default": {}, "do_layer_norm": {"do_layer_norm": True},
                "keep_sentence_boundaries": {"keep_sentence_boundaries": True},
                "scalar_mix_parameters": {"scalar_mix_parameters": [0.5, -1.0, 2.0]}}
    print(f"{'setting':<26} {'first batch max|diff|':>22} {'later batches max|diff|':>24}  masks")
    for name, kwargs in settings.items():
        theirs = original.Elmo(*files, 1, dropout=0, **kwargs).eval()
        ours = compat.Elmo(*files, 1, dropout=0, **kwargs)
        differences, masks_equal = [], True
        with torch.no_grad():
            for batch in batches:
                ids = original.batch_to_ids(batch)
                a, b = theirs(ids), ours(ids)
                differences.append(float((a["elmo_representations"][0] - b["elmo_representations"][0]).abs().max()))
                masks_equal &= bool(torch.equal(a["mask"], b["mask"]))
        later = max(differences[1:]) if len(differences) > 1 else float("nan")
        print(f"{name:<26} {differences[0]:>22.2e} {later:>24.2e}  {'equal' if masks_equal else 'DIFFERENT'}")
    print(f"(representations' scale: {float(np.abs(b['elmo_representations'][0].numpy()).mean()):.3f} mean |value|)")


if __name__ == "__main__":
    main()
