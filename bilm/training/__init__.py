"""Pretraining a biLM on your own corpus (bilm-tf's `bilm.training`, in TF2)."""
from bilm.training.checkpoints import load_options_latest_checkpoint
from bilm.training.loop import dump_weights, load_vocab, test, train
from bilm.training.windows import BidirectionalLMDataset, LMDataset

__all__ = [
    "BidirectionalLMDataset",
    "LMDataset",
    "dump_weights",
    "load_options_latest_checkpoint",
    "load_vocab",
    "test",
    "train",
]
