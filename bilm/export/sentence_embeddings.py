"""`embed_file`: AllenNLP's `elmo` command, a sentence file to an HDF5 file of ELMo vectors.

The output has AllenNLP's layout: one float32 dataset per input line, named
by the line number (or by the sentence, `use_sentence_keys=True`), holding

    "all"      `(n_layers + 1, n_tokens, 2 * projection_dim)`  every biLM layer
    "top"      `(n_tokens, 2 * projection_dim)`                the top layer
    "average"  `(n_tokens, 2 * projection_dim)`                the mean of the layers

plus `sentence_to_index`, a `(1,)` string dataset holding a JSON object that
maps each sentence (the stripped line; bytes that are not UTF-8 appear as
surrogate escapes, `errors="surrogateescape"`) to the name of its dataset, so
`f[json.loads(f["sentence_to_index"][0])[sentence]]` finds any sentence in
either naming mode.

Where this differs from AllenNLP (whose model was stateful, so one
sentence's vectors depended on the lines before it; here the model is
stateless and every sentence's vectors depend on that sentence only):
- A blank (or whitespace-only) line gives an empty `(n_layers + 1, 0, 2P)` /
  `(0, 2P)` dataset, keeping names aligned with line numbers; AllenNLP's
  command refuses files with blank lines. With `use_sentence_keys` a blank
  line has no name and is an error naming the line.
- With `use_sentence_keys` a repeated sentence is stored once (all its
  occurrences have the same vectors); AllenNLP raised an error.
- Sentence names are escaped where HDF5 cannot hold the text, see
  `sentence_key`; AllenNLP used the text as is and warned that it can fail
  (a `/` makes nested groups, a lone `.` is the root group).
- `sentence_to_index` is written in both naming modes (AllenNLP: only
  with line-number names) and the root attributes record what the file was
  made from (`output_format`, `use_sentence_keys`, `n_layers`,
  `projection_dim`, the start state, the kernel dtype, the inputs' hashes).
- The run can be resumed: the file is built as `output_file + ".partial"`
  and a rerun continues it (see `embed_file`).
"""
import os

from bilm.errors import UserError
from bilm.export.sentence_datasets import (
    character_options,
    check_arguments,
    check_model,
    load_after_checks,
    made_from_record,
    write_sentence_datasets,
)
from bilm.export.sentence_keys import check_no_blank_lines, dataset_key_function, sentence_to_index_dataset
from bilm.export.sentence_keys import sentence_key as sentence_key  # this module's name, as it was
from bilm.io.formats.embedding_files import (
    OUTPUT_FORMATS,
    SENTENCE_TO_INDEX,
    embedding_file_stamp,
    line_number_key,
)
from bilm.io.formats.output_files import writer_lock
from bilm.models.embedding_settings import EmbeddingSettings


def embed_file(input_file, output_file, options_file, weight_file, output_format="all", batch_size=None,
               use_sentence_keys=False, resume=True, overwrite=False, verbose=1, *, start=None, warm_up=None,
               kernel_dtype=None, matmul_dtype=None):
    """Writes the ELMo vectors of every line of `input_file` to `output_file`.

    Loads a stateless `BidirectionalLanguageModel` from `options_file` and
    `weight_file` (after the output paths are checked) and runs
    `write_embeddings` with it.

    Args:
        input_file: text file, one sentence per line.
        output_file: HDF5 file to write (its directory is created if missing).
        options_file: the model's `options.json` (needs `char_cnn`).
        weight_file: HDF5 weights in the original layout.
        output_format, batch_size, use_sentence_keys, resume, overwrite,
            verbose: see `write_embeddings`.
        start, warm_up, kernel_dtype: where each sentence's LSTMs start,
            the text to compute a boundary state from, the large kernels'
            dtype (`bilm.models.embedding_settings`).
        matmul_dtype: deprecated, the old name of `kernel_dtype`.

    Returns:
        number of sentence datasets written by this call.
    """
    _check_output_format(output_format)
    options = character_options(options_file, "embed_file")
    settings = EmbeddingSettings.of(start=start, warm_up=warm_up, kernel_dtype=kernel_dtype, matmul_dtype=matmul_dtype)
    check_arguments(input_file, weight_file, batch_size)
    with writer_lock(output_file):  # held until the file is renamed: a second run is refused before any check
        model = load_after_checks(input_file, output_file, options, weight_file, overwrite, settings)
        return write_embeddings(model, input_file, output_file, output_format, batch_size=batch_size,
                                use_sentence_keys=use_sentence_keys, start=start, resume=resume,
                                overwrite=overwrite, verbose=verbose)


def write_embeddings(model, input_file, output_file, output_format="all", *, batch_size=None,
                     use_sentence_keys=False, start=None, resume=True, overwrite=False, verbose=1):
    """Writes the ELMo vectors of every line of `input_file`, computed by `model`.

    Layout and naming as in this module's docstring. Lines are read as
    whitespace-tokenized UTF-8 sentences, batched by length (in sorted
    chunks of lines) and run through `model`, every sentence starting from
    `start`, so the vectors do not depend on the batch size or on the other
    lines.

    Before any work it checks that the output is not an input (by any name)
    and replaces no file that bilm did not write as a sentence embedding
    file (unless `overwrite=True`). The file is written as
    `output_file + ".partial"` and renamed when complete; the `.partial`
    records what it is made from (the input's size and SHA-256, the weight
    file's and the options' hashes, `output_format`, `use_sentence_keys`,
    the start state, the kernel dtype). With `resume=True` a `.partial` made
    from the same is continued (lines it holds are not recomputed); one made
    from anything else is an error saying what changed. `resume=False`
    starts over. A finished `output_file` from an earlier run is recomputed
    and replaced. One process at a time writes an output: while another
    holds its lock (`output_file + ".lock"`), this call is refused before
    anything is read or written, whatever `resume` and `overwrite` say, in
    one line naming that process's PID.

    Args:
        model: a stateless character `BidirectionalLanguageModel` loaded
            from a weight file (e.g. `ELMo.language_model`).
        input_file: text file, one sentence per line.
        output_file: HDF5 file to write (its directory is created if missing).
        output_format: "all", "top" or "average".
        batch_size: sentences per model call, or None (the default) for
            calls of about `BULK_MAX_TOKENS` padded tokens, which amortise
            the kernel reads of every recurrent step over many rows.
        use_sentence_keys: name datasets by sentence instead of line number.
        start: `"warm"`, `"zeros"`, or None for the model's own start.
        resume: continue an interrupted run's `.partial` file.
        overwrite: replace an existing output that bilm did not write.
        verbose: show a progress bar (time per sentence, time left).

    Returns:
        number of sentence datasets written by this call.
    """
    _check_output_format(output_format)
    key_of = dataset_key_function(use_sentence_keys)
    return write_sentence_datasets(
        model, input_file, output_file, OUTPUT_FORMATS[output_format], key_of,
        _file_layout(output_format, use_sentence_keys),
        batch_size=batch_size, resume=resume, overwrite=overwrite, verbose=verbose,
        check_lines=check_no_blank_lines if use_sentence_keys else None,
        extra_datasets=lambda: {SENTENCE_TO_INDEX: sentence_to_index_dataset(input_file, key_of)}, start=start)


def embeddings_stamp(model, input_file, output_format="all", *, use_sentence_keys=False, start=None):
    """The root attributes of the file `write_embeddings(model, input_file, ...)` writes with these arguments.

    A finished file whose attributes hold all of these (see
    `bilm.io.formats.embedding_files.changed_attributes`) was made from the same
    input, weights, options, format, naming, start state and kernel dtype,
    so it holds the vectors this call would write.

    Returns:
        `{name: str, int or bool}`.
    """
    _check_output_format(output_format)
    check_model(model)
    made_from = made_from_record(model, _file_layout(output_format, use_sentence_keys), model.start_state(start))
    return embedding_file_stamp(os.fspath(input_file), made_from)


def dump_bilm_embeddings(vocab_file, dataset_file, options_file, weight_file, outfile, batch_size=None,
                         resume=True, overwrite=False, verbose=1, start=None, warm_up=None, kernel_dtype=None,
                         matmul_dtype=None):
    """Writes every sentence's biLM layers to `outfile` (bilm-tf's dump layout).

    One dataset per line of `dataset_file`, named `str(line_number)`, shape
    `(n_layers + 1, n_tokens, 2 * projection_dim)`; an empty line gives
    `(n_layers + 1, 0, 2 * projection_dim)`. Sentences are batched by length
    and the model runs statelessly, so every sentence's result is independent
    of the others and of the batch size (the original ran one sentence at a
    time, carrying the LSTM state from one line to the next); `start`,
    `warm_up` and `kernel_dtype` (`matmul_dtype`: its deprecated old name) are as in `embed_file`. `vocab_file`
    (optional) only caches character ids. The file is checked, written,
    resumed and stamped as `write_embeddings` does.

    Returns:
        number of sentence datasets written by this call.
    """
    options = character_options(options_file, "dump_bilm_embeddings")
    settings = EmbeddingSettings.of(start=start, warm_up=warm_up, kernel_dtype=kernel_dtype, matmul_dtype=matmul_dtype)
    check_arguments(dataset_file, weight_file, batch_size)
    with writer_lock(outfile):
        model = load_after_checks(dataset_file, outfile, options, weight_file, overwrite, settings, vocab_file)
        layout = {"output_format": "all", "use_sentence_keys": False, SENTENCE_TO_INDEX: False}
        return write_sentence_datasets(
            model, dataset_file, outfile, OUTPUT_FORMATS["all"], line_number_key, layout, vocab_file=vocab_file,
            batch_size=batch_size, resume=resume, overwrite=overwrite, verbose=verbose, start=start)


def _file_layout(output_format, use_sentence_keys):
    return {"output_format": output_format, "use_sentence_keys": bool(use_sentence_keys), SENTENCE_TO_INDEX: True}



def _check_output_format(output_format):
    if output_format not in OUTPUT_FORMATS:
        raise UserError(f"output_format must be one of {sorted(OUTPUT_FORMATS)}. "
                        f"Received: output_format={output_format!r}")


