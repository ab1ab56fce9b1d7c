"""Files made from a pretrained biLM for other programs: sentence embedding files,
token embedding files, and a text-in SavedModel.

The names below are the public surface of `bilm.export`; its modules are
internal and may change.
"""
from bilm.export.saved_model import export_layer, export_saved_model
from bilm.export.sentence_embeddings import dump_bilm_embeddings, embed_file, write_embeddings
from bilm.export.token_embeddings import dump_token_embeddings

__all__ = [
    "dump_bilm_embeddings",
    "dump_token_embeddings",
    "embed_file",
    "export_layer",
    "export_saved_model",
    "write_embeddings",
]
