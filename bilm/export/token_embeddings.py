"""`dump_token_embeddings`: the char-CNN encoding of every vocabulary token, for token-input models."""
import keras
import numpy as np

from bilm.errors import UserError
from bilm.io.formats.output_files import check_output_file
from bilm.io.formats.weight_file import TOKEN_EMBEDDINGS_KIND, load_bilm_weights, token_embeddings_writer
from bilm.models.functional_bilm import build_bilm
from bilm.models.text_inputs import batcher_for
from bilm.models.token_encoding import build_token_encoder
from bilm.options import load_options
from bilm.text.vocabulary import BOS_TOKEN, EOS_TOKEN, UnicodeCharsVocabulary, Vocabulary
from bilm.utils.progress import Progress


def dump_token_embeddings(vocab_file, options_file, weight_file, outfile, batch_size=512, overwrite=False,
                          verbose=1):
    """Writes the char-CNN embedding of every vocabulary token to `outfile`.

    The file holds one dataset `embedding` `(n_vocab, projection_dim)`, row i
    for line i of `vocab_file` (`<S>` and `</S>` get the sentence boundary
    encodings), ready for `BidirectionalLanguageModel(...,
    use_character_inputs=False, embedding_weight_file=outfile)`. It is
    written under a temporary name and renamed when complete; an existing
    `outfile` is replaced only if bilm wrote it as a token embedding file
    (or with `overwrite=True`), and never if it is one of the inputs.

    Returns:
        the shape of `embedding`, `(n_vocab, projection_dim)`.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise UserError(f"batch_size must be a positive integer. Received: batch_size={batch_size!r}")
    options = load_options(options_file).for_prediction()
    outfile = check_output_file(outfile, (vocab_file, options.source, weight_file), kind=TOKEN_EMBEDDINGS_KIND,
                                overwrite=overwrite)
    token_rows = _token_rows(vocab_file, options)
    bilm = build_bilm(options)
    load_bilm_weights(bilm, weight_file)
    encoder = build_token_encoder(bilm, options)
    n_vocab = len(token_rows)
    progress = Progress(n_vocab, unit="token", verbose=verbose)
    with token_embeddings_writer(outfile, n_vocab, options.projection_dim) as embedding:
        for start in range(0, n_vocab, batch_size):
            # The tokens as one sentence of a batch of one, shifted +1 as at prediction time.
            char_ids = token_rows[np.newaxis, start:start + batch_size] + 1
            encoded = encoder(char_ids, training=False)  # any backend's tensor (on PyTorch, one that needs grad)
            embedding[start:start + char_ids.shape[1]] = keras.ops.convert_to_numpy(encoded)[0]
            progress.update(min(start + batch_size, n_vocab))
        progress.close()
    return n_vocab, options.projection_dim


def _token_rows(vocab_file, options):
    """`(n_vocab, token_id_width)` unshifted ids of every line of `vocab_file`, `<S>` and `</S>` the model's
    sentence boundaries."""
    cnn = options.char_cnn
    if cnn.characters is None:
        return UnicodeCharsVocabulary(vocab_file, cnn.max_characters_per_token).word_char_ids
    vocab = Vocabulary(vocab_file)
    boundaries = dict(zip((BOS_TOKEN, EOS_TOKEN), cnn.characters.boundary_tokens))
    tokens = [boundaries.get(vocab.id_to_word(i), vocab.id_to_word(i)) for i in range(vocab.size)]
    return batcher_for(options).batch_sentences([tokens])[0, 1:-1] - 1
