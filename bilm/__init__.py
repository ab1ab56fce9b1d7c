"""bilm: ELMo bidirectional language models for TensorFlow 2 and Keras 3."""
from bilm.batching import Batcher, TokenBatcher
from bilm.bilm_model import build_bilm
from bilm.dump import dump_bilm_embeddings, dump_token_embeddings
from bilm.elmo_layer import ELMoEmbedding
from bilm.export import export_saved_model
from bilm.language_model import BidirectionalLanguageModel
from bilm.options import BiLMOptions, load_options
from bilm.vocabulary import UnicodeCharsVocabulary, Vocabulary
from bilm.weight_layers import WeightLayers, weight_layers

__all__ = [
    "Batcher",
    "BiLMOptions",
    "BidirectionalLanguageModel",
    "ELMoEmbedding",
    "TokenBatcher",
    "UnicodeCharsVocabulary",
    "Vocabulary",
    "WeightLayers",
    "build_bilm",
    "dump_bilm_embeddings",
    "dump_token_embeddings",
    "export_saved_model",
    "load_options",
    "weight_layers",
]
