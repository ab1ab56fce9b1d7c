"""The prediction network from a biLM's files: what every front end (`BidirectionalLanguageModel`, `ELMo`,
`ELMoEmbedding.from_files`, the embedding scripts and Beam) loads the same way."""
from bilm.errors import UserError
from bilm.io.formats.weight_file import load_bilm_weights, load_token_embeddings, read_token_embeddings
from bilm.models.functional_bilm import build_bilm


def token_vocabulary_rows(options, embedding_weight_file):
    """The token table's rows of a token-input biLM (the file's rows plus the padding row 0), None for a
    character biLM; `UserError` for a token-input one without its token embedding file."""
    if options.char_cnn is not None:
        return None
    if embedding_weight_file is None:
        raise UserError(
            "A token-input biLM needs embedding_weight_file= (an HDF5 file with an "
            "'embedding' dataset, e.g. written by dump_token_embeddings).")
    return read_token_embeddings(embedding_weight_file).shape[0] + 1


def load_prediction_weights(network, options, weight_file, embedding_weight_file=None):
    """Sets a prediction network's weights from `weight_file` (original layout) and, for a token-input biLM,
    its token table from `embedding_weight_file`."""
    load_bilm_weights(network, weight_file)
    if options.char_cnn is None:
        load_token_embeddings(network, embedding_weight_file)


def load_prediction_bilm(options, weight_file, embedding_weight_file=None, kernel_dtype="float32", name="bilm"):
    """`build_bilm` for prediction (padded ids), with the weights loaded.

    Args:
        options: prediction options (see `BiLMOptions.for_prediction`); without
            `char_cnn` the model reads token ids.
        weight_file: original-layout HDF5, or None to keep the random
            initial weights (for restoring saved variables).
        embedding_weight_file: the token embedding file (token inputs).
        kernel_dtype: `"float32"`, `"bfloat16"` or `"int8"`: the dtype the
            kernels are kept in (see `build_bilm`).

    Returns:
        the functional model.
    """
    n_token_vocab = token_vocabulary_rows(options, embedding_weight_file)
    # Without a weight file the model keeps random weights; with one, drawing them first would be wasted.
    model = build_bilm(options, n_token_vocab=n_token_vocab, kernel_dtype=kernel_dtype,
                       kernel_initializer=None if weight_file is None else "zeros", name=name)
    if weight_file is not None:
        load_prediction_weights(model, options, weight_file, embedding_weight_file)
    elif n_token_vocab is not None:
        load_token_embeddings(model, embedding_weight_file)
    return model
