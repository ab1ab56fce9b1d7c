"""The Keras layers the biLM is made of, and the ELMo scalar mix.

The names below are the public surface of `bilm.layers`; its modules are
internal and may change.
"""
from bilm.layers.char_cnn import CharCNNEncoder
from bilm.layers.highway import Highway
from bilm.layers.layer_mix import WeightLayers, weight_layers
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.layers.sequence_mask import SequenceMask
from bilm.layers.stateless_dropout import StatelessDropout
from bilm.layers.token_projection import TokenProjection
from bilm.layers.unique_tokens import GatherTokens, UniqueTokens

__all__ = [
    "CharCNNEncoder",
    "GatherTokens",
    "Highway",
    "ProjectedLSTM",
    "SequenceMask",
    "StatelessDropout",
    "TokenProjection",
    "UniqueTokens",
    "WeightLayers",
    "weight_layers",
]
