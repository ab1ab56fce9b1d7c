"""`dump_token_embeddings`: the char-CNN encoding of every vocabulary token, for token-input models."""
import h5py
import keras
import numpy as np

from bilm.io.output_files import KIND_ATTRIBUTE, atomic_output, check_output_file
from bilm.io.weight_file import load_bilm_weights
from bilm.models.network import build_bilm
from bilm.options import load_options
from bilm.text.vocabulary import UnicodeCharsVocabulary
from bilm.utils.progress import Progress

KIND = "token_embeddings"


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
    options = load_options(options_file).for_prediction()
    outfile = check_output_file(outfile, (vocab_file, options.source, weight_file), kind=KIND,
                                overwrite=overwrite)
    max_chars = options.char_cnn.max_characters_per_token
    vocab = UnicodeCharsVocabulary(vocab_file, max_chars)
    bilm = build_bilm(options)
    load_bilm_weights(bilm, weight_file)
    encoder = keras.Model(bilm.input["token_characters"], bilm.output["token_embeddings"])
    n_vocab = vocab.size
    progress = Progress(n_vocab, unit="token", verbose=verbose)
    with atomic_output(outfile) as tmp, h5py.File(tmp, "w") as fout:
        fout.attrs[KIND_ATTRIBUTE] = KIND
        dataset = fout.create_dataset("embedding", (n_vocab, options.projection_dim), dtype="float32")
        for start in range(0, n_vocab, batch_size):
            # One token per row, shifted +1 as at prediction time.
            char_ids = vocab.word_char_ids[start:start + batch_size, np.newaxis, :] + 1
            dataset[start:start + len(char_ids)] = encoder(char_ids, training=False).numpy()[:, 0]
            progress.update(min(start + batch_size, n_vocab))
        progress.close()
    return n_vocab, options.projection_dim
