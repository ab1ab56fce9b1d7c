"""The biLM being trained as a prediction network, and its boundary state measured on its training text."""
import itertools

import numpy as np

from bilm.io.formats.weight_file import padded_embedding_entry, weight_table
from bilm.models.boundary_state import DEFAULT_N_SENTENCES, compute_boundary_state
from bilm.models.functional_bilm import build_bilm
from bilm.models.text_inputs import batcher_for
from bilm.text.whitespace import split_tokens


def prediction_network(lm):
    """`build_bilm`'s prediction layout with the weights of a `TrainingLM`.

    Weights go across by their names in the weight file (`weight_table`),
    which handles the prediction layout's padding rows; a token-input
    model's table gets its zero padding row in front.
    """
    token_input = not lm.use_character_inputs
    network = build_bilm(lm.options.for_prediction(lm.use_character_inputs),
                         n_token_vocab=lm.settings.n_tokens_vocab + 1 if token_input else None,
                         bidirectional=len(lm.directions) == 2, kernel_initializer="zeros", name="prediction_bilm")
    # Frozen: inference's packed graph loop, with nothing for XLA to compile.
    network.trainable = False
    trained = {entry.name: entry for entry in weight_table(lm.network)}
    for entry in weight_table(network):
        entry.set(trained[entry.name].get())
    if token_input:
        trained_table = lm.layers["token_embedding"].embeddings
        padded_embedding_entry("token_embedding", network.get_layer("token_embedding").embeddings,
                               trained_table.shape[0]).set(trained_table.numpy())
    return network


def measure_boundary_state(lm, data, n_sentences=DEFAULT_N_SENTENCES):
    """Sets `lm.boundary_state` to the mean LSTM state at sentence starts of
    `data`'s text (`LMDataset` or `BidirectionalLMDataset`), read from its
    beginning as training reads it (one pass at most: each sentence counts
    once), and returns the number of starts."""
    stream = getattr(data, "forward", data)
    lines = itertools.islice(stream.iter_lines(one_pass=True), 2 * n_sentences)
    sentences = (split_tokens(line) for line in lines)
    if lm.use_character_inputs:
        to_ids = batcher_for(lm.options).batch_sentences
    else:
        def to_ids(token_lists):
            rows = [stream.vocab.encode(tokens, split=False) + 1 for tokens in token_lists]
            ids = np.zeros([len(rows), max(map(len, rows))], np.int32)
            for i, row in enumerate(rows):
                ids[i, :len(row)] = row
            return ids
    state, n_starts = compute_boundary_state(
        prediction_network(lm), lm.options, sentences, to_ids, n_sentences,
        bidirectional=len(lm.directions) == 2)
    for key, variable in lm.boundary_state.items():
        variable.assign(state[key])
    lm.n_boundary_starts.assign(n_starts)
    return n_starts
