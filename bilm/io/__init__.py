"""Files, in two kinds: file formats (`bilm.io.formats`: the HDF5 weight layout, sentence and
embedding files, PyTorch weight files, safe output writing) and model sources (`bilm.io.sources`:
published model files and their cache, other families' models converted: ELMoForManyLangs, TF1 Hub
modules).

The names below are the public surface of `bilm.io`; its modules are
internal and may change.
"""
from bilm.io.formats.embedding_files import SentenceEmbeddingFile
from bilm.io.formats.output_files import OutputFileError, atomic_output, check_output_file
from bilm.io.formats.sentence_files import read_sentences
from bilm.io.formats.torch_pickle import TorchFileError, read_torch_state_dict
from bilm.io.formats.weight_file import (
    WeightFileError,
    load_bilm_weights,
    read_boundary_state,
    read_token_embeddings,
    save_bilm_weights,
    save_token_embeddings,
)
from bilm.io.sources.model_cache import ModelFileError, default_cache_dir
from bilm.io.sources.model_files import ModelFiles, locate_model

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
