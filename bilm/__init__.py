"""bilm: ELMo bidirectional language models for TensorFlow 2 and Keras 3."""
from bilm.utils.tensorflow_logs import import_tensorflow

import_tensorflow()  # before any module of bilm imports it (see bilm.utils.tensorflow_logs)

# isort: split
from bilm.export.sentence_embeddings import dump_bilm_embeddings
from bilm.export.token_embeddings import dump_token_embeddings
from bilm.pretrained import ELMo, load
from bilm.layers.weight_layers import WeightLayers, weight_layers
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.functional_bilm import build_bilm
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.export.saved_model import export_saved_model
from bilm.options import BiLMOptions, load_options
from bilm.text.batching import Batcher, TokenBatcher
from bilm.text.vocabulary import UnicodeCharsVocabulary, Vocabulary

__all__ = [
    "Batcher",
    "BiLMOptions",
    "BidirectionalLanguageModel",
    "ELMo",
    "ELMoEmbedding",
    "TokenBatcher",
    "UnicodeCharsVocabulary",
    "Vocabulary",
    "WeightLayers",
    "build_bilm",
    "dump_bilm_embeddings",
    "dump_token_embeddings",
    "export_saved_model",
    "load",
    "load_options",
    "weight_layers",
]
