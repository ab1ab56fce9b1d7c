"""Files made from a pretrained biLM for other programs: sentence embedding files,
token embedding files, and a text-in SavedModel (TensorFlow's).

The names below are the public surface of `bilm.export`; its modules are
internal and may change. Each is imported when first used.
"""
from bilm.utils.lazy_names import lazy_names

_MODULES = {
    "dump_bilm_embeddings": "sentence_embeddings",
    "dump_token_embeddings": "token_embeddings",
    "embed_file": "sentence_embeddings",
    "export_layer": "saved_model",
    "export_saved_model": "saved_model",
    "write_embeddings": "sentence_embeddings",
}

__all__ = sorted(_MODULES)

__getattr__, __dir__ = lazy_names(__name__, _MODULES, tensorflow_only={"export_layer", "export_saved_model"})
