"""Sentences in, each sentence's ELMo layers out: the loop under `ELMo.embed` and `ELMo.sentence_vectors`
(`each_sentence_layers`; in input order: `in_input_order`).

Sentences are read in length-sorted chunks (`length_sorted_batches`), so
memory holds one chunk of inputs and one batch of outputs at a time, and
each comes back under its input index.
"""
import numpy as np

from bilm.errors import UserError
from bilm.io.formats.embedding_files import OUTPUT_FORMATS
from bilm.io.formats.sentence_files import check_batch_size, length_sorted_batches
from bilm.models.network_calls import to_numpy
from bilm.text.whitespace import split_tokens
from bilm.utils.progress import Progress

# verbose="auto" shows a progress bar for inputs of at least this many sentences.
AUTO_PROGRESS_SENTENCES = 1000


def each_sentence_layers(language_model, batcher, sentences, *, start=None, batch_size=None, verbose="auto"):
    """Yields `(input index, (n_layers + 1, n_tokens, 2P) view)` for every sentence.

    Args:
        language_model: a stateless `BidirectionalLanguageModel`.
        batcher: its `Batcher` (`batcher_for(options)`).
        sentences: a list (or iterable) of sentences, each a list of tokens
            or a string split on whitespace.
        start, batch_size, verbose: as `ELMo.embed`'s.

    The views point into the batch's array; callers copy what they keep. An
    empty sentence gives `(n_layers + 1, 0, 2P)`.
    """
    if isinstance(sentences, (str, bytes)):
        raise TypeError(
            "sentences must be a list of sentences (strings or token lists). Received a "
            f"{type(sentences).__name__}: {sentences[:50]!r}; for one sentence pass [sentence] or use "
            "embed_sentence.")
    language_model.start_states(start)  # checks `start` before any work
    check_batch_size(batch_size)
    total = len(sentences) if hasattr(sentences, "__len__") else None
    if verbose == "auto":
        verbose = int(total is not None and total >= AUTO_PROGRESS_SENTENCES)
    elif verbose not in (0, 1):
        raise UserError(f"verbose must be 0, 1 or 'auto'. Received: verbose={verbose!r}")
    options = language_model.options
    empty = np.zeros((options.n_layers + 1, 0, 2 * options.projection_dim), np.float32)
    items = ((index, sentence_tokens(sentence, index)) for index, sentence in enumerate(sentences))
    progress = Progress(total, unit="sentence", verbose=verbose)
    done = 0
    try:
        for batch in length_sorted_batches(items, batch_size, tokens_of=lambda item: item[1]):
            filled = [(index, tokens) for index, tokens in batch if tokens]
            for index, tokens in batch:
                if not tokens:
                    yield index, empty
            if filled:
                ids = batcher.batch_sentences([tokens for _, tokens in filled])
                layers = to_numpy(language_model(ids, start=start)["lm_embeddings"])
                for row, (index, tokens) in enumerate(filled):
                    yield index, layers[row, :, :len(tokens)]
            done += len(batch)
            progress.update(done)
    finally:
        progress.close()


def in_input_order(language_model, batcher, sentences, result, **kwargs):
    """`[result(layers) for each sentence]` in input order, the layers of `each_sentence_layers(language_model,
    batcher, sentences, **kwargs)` (`result` copies what it keeps)."""
    results = {index: result(layers) for index, layers in each_sentence_layers(language_model, batcher, sentences,
                                                                               **kwargs)}
    return [results[index] for index in range(len(results))]


def layer_selector(layers, n_layers):
    """`(n_layers + 1, n_tokens, 2P)` view -> the new array `layers` (`ELMo.embed`'s) asks for."""
    if isinstance(layers, str) and layers in OUTPUT_FORMATS:
        if layers == "average":
            return OUTPUT_FORMATS["average"]
        return lambda sentence_layers: OUTPUT_FORMATS[layers](sentence_layers).copy()
    if isinstance(layers, (int, np.integer)) and not isinstance(layers, bool) and 0 <= layers <= n_layers:
        return lambda sentence_layers: sentence_layers[layers].copy()
    raise UserError(f"layers must be 'average', 'all', 'top' or a layer number 0-{n_layers}. "
                    f"Received: layers={layers!r}")


def sentence_tokens(sentence, index):
    """A sentence's tokens: a string split on whitespace, or its list of string tokens (`index`: its place in
    the input, for the error)."""
    if isinstance(sentence, str):
        return split_tokens(sentence)
    if isinstance(sentence, bytes):
        raise TypeError(f"sentences[{index}] is bytes ({sentence[:50]!r}); decode it to str first.")
    try:
        tokens = list(sentence)
    except TypeError:
        raise TypeError(f"sentences[{index}] must be a string or a list of tokens. Received a "
                        f"{type(sentence).__name__}: {sentence!r}") from None
    for token in tokens:
        if not isinstance(token, (str, bytes)):
            raise TypeError(f"sentences[{index}] has a token that is not a string: {token!r} "
                            f"({type(token).__name__}).")
    return tokens
