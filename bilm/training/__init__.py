"""Pretraining a biLM on your own corpus (bilm-tf's `bilm.training`, in TF2).

`train`, `evaluate` (bilm-tf's `test`), `dump_weights`,
`load_options_latest_checkpoint` and `load_vocab` keep bilm-tf's signatures (`train(..., init_from=MODEL)` adapts
a published model to new text, `bilm.training.model.adaptation`); `BidirectionalLMDataset` (and
`LMDataset` for one direction) stream the training windows from shards.
The names below are the public surface of `bilm.training`; its modules are
internal and may change. `test` and `test_from_files` are deprecated
aliases of `evaluate` and `evaluate_from_files` (pytest collects a test
module's names that start with "test").
"""
from bilm.training.convert.tf1_checkpoint import convert_tf1_checkpoint
from bilm.training.convert.weight_export import dump_weights
from bilm.training.data.lm_dataset import BidirectionalLMDataset, LMDataset, load_vocab
from bilm.training.data.sample_corpus import write_sample_corpus
from bilm.training.data.vocab_builder import build_vocab
from bilm.training.model.adaptation import AdaptationError
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT, SOFTMAX_INITS
from bilm.training.quickstart import run_quickstart
from bilm.training.run.checkpoints import CheckpointError, load_options_latest_checkpoint
from bilm.training.run.evaluation import EVALUATION_STARTS, evaluate, test
from bilm.training.run.from_files import evaluate_from_files, test_from_files, train_from_files
from bilm.training.run.loop import NonFiniteLossError, TrainingInterrupted, train

__all__ = [
    "DEFAULT_SOFTMAX_INIT",
    "EVALUATION_STARTS",
    "SOFTMAX_INITS",
    "AdaptationError",
    "BidirectionalLMDataset",
    "CheckpointError",
    "LMDataset",
    "NonFiniteLossError",
    "TrainingInterrupted",
    "build_vocab",
    "convert_tf1_checkpoint",
    "dump_weights",
    "evaluate",
    "evaluate_from_files",
    "load_options_latest_checkpoint",
    "load_vocab",
    "run_quickstart",
    "test",
    "test_from_files",
    "train",
    "train_from_files",
    "write_sample_corpus",
]
