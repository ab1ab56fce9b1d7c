"""The run that writes a sentence embedding file (`embed_file`, `write_embeddings`, `dump_bilm_embeddings`): the
checks made before the model loads, what the file records of how its vectors are made, and one dataset per line."""
import os
import warnings

from bilm.errors import UserError
from bilm.io.formats.embedding_files import SentenceEmbeddingFile, check_sentences_file
from bilm.io.formats.hashing import file_sha256, json_sha256
from bilm.io.formats.sentence_files import check_batch_size
from bilm.io.formats.weight_file import WeightFileError
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.network_calls import to_numpy
from bilm.models.text_inputs import batcher_for
from bilm.options import load_options


def check_model(model):
    """Refuses a model whose vectors an embedding file cannot record how it made (stateful, token inputs, no weight
    file)."""
    if model.stateful or not model.use_character_inputs or model.weight_file is None:
        raise UserError("The model must be a stateless character BidirectionalLanguageModel loaded from a weight "
                        "file (BidirectionalLanguageModel(options, weight_file, stateful=False)).")


def made_from_record(model, layout, start_state):
    """What an embedding file records of how its vectors are made (compared on resume)."""
    options = model.options
    return {**layout, "n_layers": options.n_layers, "projection_dim": options.projection_dim,
            "weight_sha256": file_sha256(model.weight_file),
            "options_sha256": json_sha256(options.to_dict()),
            # The stamp keeps the key of the files written before `kernel_dtype`'s rename, which still resume.
            "start": start_state.start, "matmul_dtype": model.kernel_dtype,
            "boundary_state_sha256": json_sha256(
                {key: value.tolist() for key, value in start_state.boundary_state.items()})
            if start_state.start == "warm" else ""}


def character_options(options_file, who):
    """The options of `options_file`, refused in one line naming `who` unless they are a character model's."""
    options = load_options(options_file)
    if options.char_cnn is None:
        raise UserError(f"{options.source}: {who} needs a character model (a 'char_cnn' section).")
    return options


def check_arguments(input_file, weight_file, batch_size):
    """What can be checked before the output is locked (or its directory created)."""
    check_sentences_file(input_file)
    check_batch_size(batch_size)
    if not os.path.isfile(weight_file):
        raise WeightFileError(f"Weight file not found: {weight_file}")


def load_after_checks(input_file, output_file, options, weight_file, overwrite, settings, vocab_file=None):
    """The stateless model of `settings` (an `EmbeddingSettings`), loaded once everything that can be checked
    without it is."""
    SentenceEmbeddingFile.check_paths(input_file, output_file, (options.source, weight_file, vocab_file), overwrite)
    return BidirectionalLanguageModel.from_settings(options, weight_file, settings)


def write_sentence_datasets(model, input_file, output_file, select, key_of, layout, *, vocab_file=None,
                             batch_size=None, resume=True, overwrite=False, verbose=1, check_lines=None,
                             extra_datasets=None, start=None):
    """The run behind `write_embeddings` and `dump_bilm_embeddings`: one
    dataset per line, `select` of its `(n_layers + 1, n_tokens, 2P)` layers."""
    check_batch_size(batch_size)
    check_model(model)
    options = model.options
    start_state = model.start_state(start)
    sources = (options.source, model.weight_file, vocab_file)
    made_from = made_from_record(model, layout, start_state)
    with SentenceEmbeddingFile(input_file, output_file, made_from, inputs=sources, resume=resume,
                               overwrite=overwrite, verbose=verbose) as target:
        if check_lines is not None:
            check_lines(input_file)
        batcher = batcher_for(options, vocab_file)

        def embed(sentences):
            layers = to_numpy(model(batcher.batch_sentences(sentences), start=start_state.start)["lm_embeddings"])
            return [select(layers[i, :, :len(tokens)]) for i, tokens in enumerate(sentences)]

        written = target.write(embed, batch_size=batch_size, key_of=key_of, extra_datasets=extra_datasets)
    if target.n_lines == 0:
        warnings.warn(f"{input_file} is empty: wrote {output_file} with no sentence datasets.", stacklevel=3)
    return written
