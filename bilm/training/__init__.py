"""Pretraining a biLM on your own corpus (bilm-tf's `bilm.training`, in TF2).

`train`, `evaluate` (bilm-tf's `test`), `dump_weights`,
`load_options_latest_checkpoint` and `load_vocab` keep bilm-tf's signatures (`train(..., init_from=MODEL)` adapts
a published model to new text, `bilm.training.model.adaptation`); `BidirectionalLMDataset` (and
`LMDataset` for one direction) stream the training windows from shards.
The names below are the public surface of `bilm.training`; its modules are
internal and may change. `test` and `test_from_files` are deprecated
aliases of `evaluate` and `evaluate_from_files` (pytest collects a test
module's names that start with "test").

Each name is imported when first used. `train`, `train_from_files`, `evaluate_from_files` and the rest of the
training run on TensorFlow, JAX and PyTorch alike (`KERAS_BACKEND`; the backend's trainer:
`bilm.backend.trainer_module`), with the same arguments, checkpoints and printed lines; `train_on_jax`,
`train_from_files_on_jax` and `evaluate_from_files_on_jax` are their deprecated earlier names. Every name here runs
on every backend: `evaluate` (and `test`) reads a checkpoint of any backend, `convert_tf1_checkpoint` reads a
TF1 checkpoint with NumPy.
"""
from bilm.utils.lazy_names import lazy_names

_MODULES = {
    "AdaptationError": "model.adaptation",
    "BidirectionalLMDataset": "data.lm_dataset",
    "CheckpointError": "run.run_checkpoint",
    "DEFAULT_SOFTMAX_INIT": "model.softmax_init",
    "EVALUATION_STARTS": "run.evaluation_starts",
    "LMDataset": "data.lm_dataset",
    "NonFiniteLossError": "run.driver",
    "SOFTMAX_INITS": "model.softmax_init",
    "TrainingInterrupted": "run.loop",
    "build_vocab": "data.vocab_builder",
    "convert_tf1_checkpoint": "convert.tf1_checkpoint",
    "dump_weights": "convert.weight_export",
    "evaluate": "run.evaluation",
    "evaluate_from_files": "run.from_files",
    "evaluate_from_files_on_jax": "run.earlier_names",
    "load_options_latest_checkpoint": "run.run_directory",
    "load_vocab": "data.lm_dataset",
    "run_quickstart": "quickstart",
    "test": "run.evaluation",
    "test_from_files": "run.from_files",
    "train": "run.loop",
    "train_from_files": "run.from_files",
    "train_from_files_on_jax": "run.earlier_names",
    "train_on_jax": "run.earlier_names",
    "write_sample_corpus": "data.sample_corpus",
}

__all__ = sorted(_MODULES)

__getattr__, __dir__ = lazy_names(__name__, _MODULES)
