"""Files: the HDF5 weight layout, published model files and their cache, other families' models
(ELMoForManyLangs, PyTorch weight files, TF1 Hub modules), sentence and embedding files, safe output
writing.

The names below are the public surface of `bilm.io`; its modules are
internal and may change.
"""
from bilm.io.embedding_files import SentenceEmbeddingFile
from bilm.io.model_cache import ModelFileError, default_cache_dir
from bilm.io.model_files import ModelFiles, locate_model
from bilm.io.output_files import OutputFileError, atomic_output, check_output_file
from bilm.io.sentence_files import read_sentences
from bilm.io.torch_pickle import TorchFileError, read_torch_state_dict
from bilm.io.weight_file import (
    WeightFileError,
    load_bilm_weights,
    read_boundary_state,
    read_token_embeddings,
    save_bilm_weights,
    save_token_embeddings,
)

__all__ = [
    "ModelFileError",
    "ModelFiles",
    "OutputFileError",
    "SentenceEmbeddingFile",
    "TorchFileError",
    "WeightFileError",
    "atomic_output",
    "check_output_file",
    "default_cache_dir",
    "load_bilm_weights",
    "locate_model",
    "read_boundary_state",
    "read_sentences",
    "read_torch_state_dict",
    "read_token_embeddings",
    "save_bilm_weights",
    "save_token_embeddings",
]
