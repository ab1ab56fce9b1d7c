"""Pretraining a biLM on your own corpus (bilm-tf's `bilm.training`, in TF2).

`train`, `test`, `dump_weights`, `load_options_latest_checkpoint` and
`load_vocab` keep bilm-tf's signatures (`train(..., init_from=MODEL)` adapts
a published model to new text, `bilm.training.adaptation`); `BidirectionalLMDataset` (and
`LMDataset` for one direction) stream the training windows from shards.
The names below are the public surface of `bilm.training`; its modules are
internal and may change.
"""
from bilm.training.adaptation import AdaptationError
from bilm.training.checkpoints import CheckpointError, load_options_latest_checkpoint
from bilm.training.evaluation import test
from bilm.training.from_files import test_from_files, train_from_files
from bilm.training.loop import NonFiniteLossError, TrainingInterrupted, train
from bilm.training.quickstart import run_quickstart
from bilm.training.sample_corpus import write_sample_corpus
from bilm.training.tf1_checkpoint import convert_tf1_checkpoint
from bilm.training.vocab_builder import build_vocab
from bilm.training.weight_export import dump_weights
from bilm.training.windows import BidirectionalLMDataset, LMDataset, load_vocab

__all__ = [
    "AdaptationError",
    "BidirectionalLMDataset",
    "CheckpointError",
    "LMDataset",
    "NonFiniteLossError",
    "TrainingInterrupted",
    "build_vocab",
    "convert_tf1_checkpoint",
    "dump_weights",
    "load_options_latest_checkpoint",
    "load_vocab",
    "run_quickstart",
    "test",
    "test_from_files",
    "train",
    "train_from_files",
    "write_sample_corpus",
]
