"""The biLM assembled from its layers: the functional network, the pretrained model for
prediction, its start state, and the ELMo Keras layer.

The names below are the public surface of `bilm.models`; its modules are
internal and may change.
"""
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.boundary_state import compute_boundary_state
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.functional_bilm import build_bilm, state_keys
from bilm.models.random_weights import write_random_model
from bilm.models.start_state import STARTS, StartState, resolve_start

__all__ = [
    "STARTS",
    "BidirectionalLanguageModel",
    "ELMoEmbedding",
    "StartState",
    "build_bilm",
    "compute_boundary_state",
    "resolve_start",
    "state_keys",
    "write_random_model",
]
