"""Pretraining a biLM on your own corpus (bilm-tf's `bilm.training`, in TF2).

`train`, `evaluate` (bilm-tf's `test`), `dump_weights`,
`load_options_latest_checkpoint` and `load_vocab` keep bilm-tf's signatures (`train(..., init_from=MODEL)` adapts
a published model to new text, `bilm.training.model.adaptation`); `BidirectionalLMDataset` (and
`LMDataset` for one direction) stream the training windows from shards.
The names below are the public surface of `bilm.training`; its modules are
internal and may change. `test` and `test_from_files` are deprecated
aliases of `evaluate` and `evaluate_from_files` (pytest collects a test
module's names that start with "test").

Each name is imported when first used. On JAX and PyTorch (`KERAS_BACKEND=jax` or `torch`)
`train`, `train_from_files` and `evaluate_from_files` are the array trainer's (`bilm.training.jax`,
one step written in `keras.ops` for both: the same arguments and meaning, what they do not have
refused in one line), beside `train_on_jax`, `train_from_files_on_jax` and
`evaluate_from_files_on_jax`, which are the same functions on either backend
(docs/training.md, "Training on JAX and PyTorch"). There the names that need
TensorFlow say so in one line; the vocabulary builder, the sample corpus and
`dump_weights` run anywhere, and `run_quickstart` trains on every backend.
"""
from bilm.utils.lazy_names import lazy_names

_MODULES = {
    "AdaptationError": "model.adaptation",
    "BidirectionalLMDataset": "data.lm_dataset",
    "CheckpointError": "run.checkpoints",
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
    "evaluate_from_files_on_jax": "jax.evaluation",
    "load_options_latest_checkpoint": "run.checkpoints",
    "load_vocab": "data.lm_dataset",
    "run_quickstart": "quickstart",
    "test": "run.evaluation",
    "test_from_files": "run.from_files",
    "train": "run.loop",
    "train_from_files": "run.from_files",
    "train_from_files_on_jax": "jax.from_files",
    "train_on_jax": "jax.loop",
    "write_sample_corpus": "data.sample_corpus",
}

__all__ = sorted(_MODULES)

__getattr__, __dir__ = lazy_names(__name__, _MODULES, tensorflow_only=set(_MODULES) - {
    "DEFAULT_SOFTMAX_INIT",
    "EVALUATION_STARTS",
    "NonFiniteLossError",
    "SOFTMAX_INITS",
    "TrainingInterrupted",
    "build_vocab",
    "dump_weights",
    "evaluate_from_files_on_jax",
    "load_vocab",
    "run_quickstart",
    "train_from_files_on_jax",
    "train_on_jax",
    "write_sample_corpus",
}, off_tensorflow={"train": "jax.train_call:train", "train_from_files": "jax.from_files:train_from_files_on_jax",
           "evaluate_from_files": "jax.evaluation:evaluate_from_files_on_jax",
           "test_from_files": "jax.evaluation:evaluate_from_files_on_jax"})
