"""Pretraining a biLM on your own corpus (bilm-tf's `bilm.training`, in TF2).

`train`, `test`, `dump_weights`, `load_options_latest_checkpoint` and
`load_vocab` keep bilm-tf's signatures; `BidirectionalLMDataset` (and
`LMDataset` for one direction) stream the training windows from shards.
"""
from bilm.training.checkpoints import load_options_latest_checkpoint
from bilm.training.evaluation import test
from bilm.training.loop import train
from bilm.training.weight_export import dump_weights
from bilm.training.windows import BidirectionalLMDataset, LMDataset, load_vocab

__all__ = [
    "BidirectionalLMDataset",
    "LMDataset",
    "dump_weights",
    "load_options_latest_checkpoint",
    "load_vocab",
    "test",
    "train",
]
