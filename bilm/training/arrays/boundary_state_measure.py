"""The boundary state of a training state: the mean LSTM state at sentence starts of a text, measured with a
prediction-layout network holding the state's weights (`bilm.training.model.boundary_state_measure`).

Runs on Keras's TensorFlow, JAX and PyTorch backends.
"""
from bilm.models.boundary_state import DEFAULT_N_SENTENCES
from bilm.training.model.boundary_state_measure import boundary_state_of_text, prediction_network_of


def measure_boundary_state(step, state, data, n_sentences=DEFAULT_N_SENTENCES):
    """The boundary state of the biLM in `state` on `data`'s text.

    Args:
        step: the run's `ArrayTrainStep` (its `network` gets the state's
            weights, `write_weights`).
        state: an `ArrayTrainStep` state (only its weights are read).
        data: an `LMDataset` or `BidirectionalLMDataset`, read from its
            beginning (one pass at most: each sentence counts once).
        n_sentences: sentence starts averaged (at most).

    Returns:
        `({state key: float32 (size,)}, number of starts averaged)`, as
        `save_checkpoint` and `save_bilm_weights` take it.
    """
    step.write_weights(state)
    token_rows = None if step.use_character_inputs else step.settings.n_tokens_vocab
    network = prediction_network_of(step.network, step.options, "backward" in step.directions, token_rows)
    return boundary_state_of_text(network, step.options, data, "backward" in step.directions, n_sentences)
