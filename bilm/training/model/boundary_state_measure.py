"""The biLM being trained as a prediction network, and its boundary state measured on its training text.

What the array step's measure (`bilm.training.arrays.boundary_state_measure`) builds on, for any
training-layout `build_bilm` network: `prediction_network_of` and `boundary_state_of_text`.
"""
import itertools

import numpy as np

from bilm.io.formats.weight_file import padded_embedding_entry, weight_table
from bilm.models.boundary_state import DEFAULT_N_SENTENCES, compute_boundary_state
from bilm.models.functional_bilm import build_bilm
from bilm.models.text_inputs import batcher_for
from bilm.text.whitespace import split_tokens


def prediction_network_of(network, options, bidirectional, n_tokens_vocab=None):
    """`build_bilm`'s prediction layout with the weights of a training-layout `network`.

    Args:
        network: a `build_bilm(layout="training")` model with its weights.
        options: its `BiLMOptions`.
        bidirectional: the network has a backward stack.
        n_tokens_vocab: for a token-input network, the rows of its token
            table (None: character inputs).

    Weights go across by their names in the weight file (`weight_table`),
    which handles the prediction layout's padding rows; a token-input
    model's table gets its zero padding row in front.
    """
    token_input = n_tokens_vocab is not None
    prediction = build_bilm(options.for_prediction(not token_input),
                            n_token_vocab=n_tokens_vocab + 1 if token_input else None,
                            bidirectional=bidirectional, kernel_initializer="zeros", name="prediction_bilm")
    # Frozen: inference's packed graph loop, with nothing for XLA to compile.
    prediction.trainable = False
    trained = {entry.name: entry for entry in weight_table(network)}
    for entry in weight_table(prediction):
        entry.set(trained[entry.name].get())
    if token_input:
        trained_table = network.get_layer("token_embedding").embeddings
        padded_embedding_entry("token_embedding", prediction.get_layer("token_embedding").embeddings,
                               trained_table.shape[0]).set(trained_table.numpy())
    return prediction


def boundary_state_of_text(network, options, data, bidirectional, n_sentences=DEFAULT_N_SENTENCES):
    """The mean LSTM state at sentence starts of `data`'s text, for a prediction-layout `network`.

    Args:
        network: a prediction-layout `build_bilm` model with its weights
            (`prediction_network_of`).
        options: the training `BiLMOptions` (character inputs when they
            have a `char_cnn`).
        data: an `LMDataset` or `BidirectionalLMDataset`, read from its
            beginning as training reads it (one pass at most: each sentence
            counts once).
        bidirectional: the network has a backward stack.
        n_sentences: sentence starts averaged (at most).

    Returns:
        `({state key: float32 (size,)}, number of starts averaged)`.
    """
    stream = getattr(data, "forward", data)
    lines = itertools.islice(stream.iter_lines(one_pass=True), 2 * n_sentences)
    sentences = (split_tokens(line) for line in lines)
    if options.char_cnn is not None:
        to_ids = batcher_for(options).batch_sentences
    else:
        def to_ids(token_lists):
            rows = [stream.vocab.encode(tokens, split=False) + 1 for tokens in token_lists]
            ids = np.zeros([len(rows), max(map(len, rows))], np.int32)
            for i, row in enumerate(rows):
                ids[i, :len(row)] = row
            return ids
    return compute_boundary_state(network, options, sentences, to_ids, n_sentences, bidirectional=bidirectional)
