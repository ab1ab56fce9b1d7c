"""Embedding dumps to HDF5: biLM layers per sentence, and token embeddings.

Both stream their input, run the model on many sentences (or vocabulary
entries) per call and write each result as soon as it is computed, to a
temporary name that is renamed at the end.
"""
import os

import h5py
import keras
import numpy as np

from bilm.text.batching import Batcher
from bilm.models.predictor import BidirectionalLanguageModel, prediction_options
from bilm.options import load_options
from bilm.models.network import build_bilm
from bilm.io.sentence_files import count_lines, length_sorted_batches, read_sentences
from bilm.text.vocabulary import UnicodeCharsVocabulary
from bilm.io.weight_file import load_bilm_weights


def _check_output_path(outfile):
    directory = os.path.dirname(os.path.abspath(outfile))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"The output directory does not exist: {directory} (for {outfile}).")


def write_sentence_embeddings(dataset_file, outfile, embed_batch, batch_size=64, resume=False,
                              key_of=lambda number, line: str(number), verbose=1, extra_datasets=None):
    """Embeds every line of `dataset_file` and writes one HDF5 dataset per line.

    Args:
        dataset_file: text, one whitespace-tokenized sentence per line.
        outfile: the HDF5 file to write. It is built as `outfile + ".partial"`
            and renamed when complete.
        embed_batch: function `(list of token lists) -> list of np.ndarray`,
            one array per sentence, written as that sentence's dataset.
        batch_size: sentences per model call (sorted by length in chunks).
        resume: continue a `.partial` file left by an interrupted run, skipping
            the lines it already holds (otherwise it is started afresh).
        key_of: `(line_number, line) -> dataset name`.
        verbose: show a progress bar (this call's sentences done / left to do).
        extra_datasets: function `() -> {name: np.ndarray}` written at the end.

    Returns:
        number of datasets written by this call.
    """
    if not os.path.exists(dataset_file):
        raise FileNotFoundError(f"Dataset file not found: {dataset_file}")
    _check_output_path(outfile)
    partial = f"{outfile}.partial"
    total = count_lines(dataset_file)
    mode = "a" if resume and os.path.exists(partial) else "w"
    written = 0
    with h5py.File(partial, mode) as fout:
        todo = ((n, line, tokens) for n, line, tokens in read_sentences(dataset_file)
                if key_of(n, line) not in fout)
        # The bar counts this call's sentences only, so a resumed run's rate and
        # ETA are its own (an offset start would make it look many times faster).
        remaining = max(total - len(fout), 0)
        progress = keras.utils.Progbar(remaining, unit_name="sentence") if verbose and remaining else None
        done = 0
        for batch in length_sorted_batches(todo, batch_size):
            embeddings = embed_batch([tokens for _, _, tokens in batch])
            for (number, line, _), embedding in zip(batch, embeddings):
                key = key_of(number, line)
                if key not in fout:
                    fout.create_dataset(key, data=np.asarray(embedding, dtype=np.float32))
                    written += 1
            fout.flush()
            done += len(batch)
            if progress is not None:
                progress.update(done)
        if progress is not None and done < remaining:  # repeated keys were skipped
            progress.update(done, finalize=True)
        if extra_datasets is not None:
            for name, value in extra_datasets().items():
                if name in fout:
                    del fout[name]
                fout.create_dataset(name, data=value)
    os.replace(partial, outfile)
    return written


def lm_embeddings_of(model, batcher):
    """`embed_batch` for `write_sentence_embeddings`: each sentence's
    `(n_layers + 1, n_tokens, 2 * projection_dim)` biLM layers."""

    def embed(sentences):
        ids = batcher.batch_sentences(sentences)
        out = model(ids)
        layers = out["lm_embeddings"].numpy()
        return [layers[i, :, :len(tokens)] for i, tokens in enumerate(sentences)]

    return embed


def dump_bilm_embeddings(vocab_file, dataset_file, options_file, weight_file, outfile,
                         batch_size=64, verbose=1):
    """Writes every sentence's biLM layers to `outfile` (original layout).

    One dataset per line of `dataset_file`, named `str(line_number)`, shape
    `(n_layers + 1, n_tokens, 2 * projection_dim)`; an empty line gives
    `(n_layers + 1, 0, 2 * projection_dim)`. Sentences are batched by length
    and the model runs statelessly, so every sentence's result is independent
    of the others and of the batch size (the original ran one sentence at a
    time, carrying the LSTM state from one line to the next).
    """
    options = load_options(options_file)
    if options.char_cnn is None:
        raise ValueError(f"{options.source}: dump_bilm_embeddings needs a character model ('char_cnn').")
    batcher = Batcher(vocab_file, options.char_cnn.max_characters_per_token)
    model = BidirectionalLanguageModel(options, weight_file, max_batch_size=batch_size, stateful=False)
    return write_sentence_embeddings(dataset_file, outfile, lm_embeddings_of(model, batcher),
                                     batch_size=batch_size, verbose=verbose)


def dump_token_embeddings(vocab_file, options_file, weight_file, outfile, batch_size=512, verbose=1):
    """Writes the char-CNN embedding of every vocabulary token to `outfile`.

    The file holds one dataset `embedding` `(n_vocab, projection_dim)`, row i
    for line i of `vocab_file` (`<S>` and `</S>` get the sentence boundary
    encodings), ready for `BidirectionalLanguageModel(...,
    use_character_inputs=False, embedding_weight_file=outfile)`.
    """
    options = prediction_options(load_options(options_file))
    _check_output_path(outfile)
    max_chars = options.char_cnn.max_characters_per_token
    vocab = UnicodeCharsVocabulary(vocab_file, max_chars)
    bilm = build_bilm(options, padded=True)
    load_bilm_weights(bilm, weight_file)
    encoder = keras.Model(bilm.input["token_characters"], bilm.output["token_embeddings"])
    partial = f"{outfile}.partial"
    n_vocab = vocab.size
    progress = keras.utils.Progbar(n_vocab, unit_name="token") if verbose else None
    with h5py.File(partial, "w") as fout:
        dataset = fout.create_dataset("embedding", (n_vocab, options.projection_dim), dtype="float32")
        for start in range(0, n_vocab, batch_size):
            # One token per row, shifted +1 as at prediction time.
            char_ids = vocab.word_char_ids[start:start + batch_size, np.newaxis, :] + 1
            dataset[start:start + len(char_ids)] = encoder(char_ids, training=False).numpy()[:, 0]
            if progress is not None:
                progress.update(min(start + batch_size, n_vocab))
    os.replace(partial, outfile)
