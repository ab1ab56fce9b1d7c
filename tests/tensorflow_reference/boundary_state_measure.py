"""The boundary state of a `TrainingLM` (TensorFlow's variables), the reference the array step's measure
(`bilm.training.arrays.boundary_state_measure`) is tested against."""
from bilm.models.boundary_state import DEFAULT_N_SENTENCES
from bilm.training.model.boundary_state_measure import boundary_state_of_text, prediction_network_of


def prediction_network(lm):
    """`prediction_network_of` a `TrainingLM`."""
    return prediction_network_of(lm.network, lm.options, len(lm.directions) == 2,
                                 None if lm.use_character_inputs else lm.settings.n_tokens_vocab)



def measure_boundary_state(lm, data, n_sentences=DEFAULT_N_SENTENCES):
    """Sets `lm.boundary_state` to the mean LSTM state at sentence starts of
    `data`'s text (`LMDataset` or `BidirectionalLMDataset`), read from its
    beginning as training reads it (one pass at most: each sentence counts
    once), and returns the number of starts."""
    state, n_starts = boundary_state_of_text(prediction_network(lm), lm.options, data, len(lm.directions) == 2,
                                             n_sentences)
    for key, variable in lm.boundary_state.items():
        variable.assign(state[key])
    lm.n_boundary_starts.assign(n_starts)
    return n_starts
