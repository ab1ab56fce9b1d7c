"""Building an `ELMoEmbedding` from a biLM's files: options, weights, token embeddings, the boundary state."""
from bilm.errors import UserError
from bilm.io.formats.weight_file import read_scalar_mix
from bilm.models.functional_bilm import WEIGHTS_FOLLOW
from bilm.models.prediction_network import load_prediction_weights, token_vocabulary_rows
from bilm.models.start_state import resolve_start
from bilm.options import load_options


def elmo_embedding_from_files(layer_class, options_file, weight_file, *, embedding_weight_file=None, vocab_file=None,
                              start=None, warm_up=None, boundary_state=None, **kwargs):
    """A `layer_class` (`ELMoEmbedding` or a subclass) with the weights of `weight_file`.

    Args:
        options_file: the biLM's `options.json` (or its dict).
        weight_file: HDF5 weights in the original layout.
        embedding_weight_file: HDF5 token embeddings (`embedding`,
            e.g. from `dump_token_embeddings`) for a token-input biLM;
            the layer then reads token ids.
        vocab_file: the vocabulary of a token-input biLM given text.
        start: `"warm"`, `"zeros"`, or None for `"warm"` when there is
            a boundary state, else `"zeros"` (see `bilm.models.start_state`).
        warm_up: for weights without a boundary state: your own text
            (sentences, or a text file's path) to compute one from.
        boundary_state: `{state key: (size,)}` to use instead of the one
            stored in `weight_file` (e.g. `ELMo.boundary_state`).
        **kwargs: the constructor's other arguments (`output`,
            `kernel_dtype`, ...).

    Returns:
        the layer, built.
    """
    options = load_options(options_file)
    use_character_inputs = embedding_weight_file is None
    if use_character_inputs and options.char_cnn is None:
        raise UserError(
            f"{options.source}: the options have no 'char_cnn' section, so this is a token-input "
            "biLM: pass embedding_weight_file= (HDF5 with 'embedding') and, for text input, vocab_file=.")
    options = options.for_prediction(use_character_inputs)
    if not use_character_inputs:
        kwargs["n_token_vocab"] = token_vocabulary_rows(options, embedding_weight_file)
    if vocab_file is not None:
        from bilm.text.graph_batching import vocabulary_tokens  # text inputs: TensorFlow's

        kwargs["vocabulary"] = vocabulary_tokens(vocab_file)
    with WEIGHTS_FOLLOW.on():  # no random draws: the file sets every weight
        layer = layer_class(options, **kwargs)
    load_prediction_weights(layer.network, options, weight_file, embedding_weight_file)
    scalar_mix = read_scalar_mix(weight_file)
    if scalar_mix is not None:
        layer.set_scalar_mix(*scalar_mix, source=weight_file)
    layer.set_start_state(resolve_start(options, start, boundary_state=boundary_state, weight_file=weight_file,
                                        warm_up=warm_up, network=layer.network))
    return layer
