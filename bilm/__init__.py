"""bilm: ELMo bidirectional language models for TensorFlow 2 and Keras 3."""
from bilm.text.batching import Batcher, TokenBatcher
from bilm.models.network import build_bilm
from bilm.commands.dump import dump_bilm_embeddings, dump_token_embeddings
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.saved_model import export_saved_model
from bilm.models.predictor import BidirectionalLanguageModel
from bilm.options import BiLMOptions, load_options
from bilm.text.vocabulary import UnicodeCharsVocabulary, Vocabulary
from bilm.layers.weight_layers import WeightLayers, weight_layers

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
