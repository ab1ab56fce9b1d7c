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
  `projection_dim`, the start state, `matmul_dtype`, the inputs' hashes).
- The run can be resumed: the file is built as `output_file + ".partial"`
  and a rerun continues it (see `embed_file`).
"""
import json
import os
import warnings

import h5py
import numpy as np

from bilm.io.embedding_files import (
    OUTPUT_FORMATS,
    SENTENCE_TO_INDEX,
    SentenceEmbeddingFile,
    file_sha256,
    json_sha256,
    line_number_key,
)
from bilm.io.sentence_files import check_batch_size, read_sentences
from bilm.io.weight_file import WeightFileError
from bilm.models.boundary_state import STARTS, read_boundary_state, resolve_start
from bilm.models.predictor import BidirectionalLanguageModel
from bilm.ops.matmul_dtype import MATMUL_DTYPES, check_matmul_dtype
from bilm.options import load_options
from bilm.text.batching import Batcher

# Whole sentences that cannot be dataset names as they are: "." is the group
# itself, and the mapping's own name would collide.
_RESERVED_NAMES = (".", SENTENCE_TO_INDEX)


def sentence_key(sentence):
    """The dataset name of `sentence` with `use_sentence_keys=True`.

    The sentence itself, except that `%`, `/` and NUL, and bytes that were
    not valid UTF-8 (read as surrogate escapes), are percent-encoded (`%25`,
    `%2F`, `%00`, `%E9`); a sentence that is exactly `.` or
    `sentence_to_index` gets its first character encoded (`%2E`,
    `%73entence_to_index`). Distinct sentences get distinct names.
    """
    if not sentence:
        raise ValueError("An empty sentence has no dataset name.")
    out = []
    for char in sentence:
        code = ord(char)
        if char in "%/\x00":
            out.append(f"%{code:02X}")
        elif 0xDC80 <= code <= 0xDCFF:  # surrogateescape of the byte code - 0xDC00
            out.append(f"%{code - 0xDC00:02X}")
        else:
            out.append(char)
    if sentence in _RESERVED_NAMES:
        out[0] = f"%{ord(sentence[0]):02X}"
    return "".join(out)


def _key_function(use_sentence_keys):
    if use_sentence_keys:
        return lambda number, line: sentence_key(line.strip())
    return line_number_key


def _sentence_to_index(input_file, key_of):
    """The `sentence_to_index` dataset: JSON {stripped line: dataset name}.

    A sentence on several lines maps to its last line, as in AllenNLP.
    """
    mapping = {line.strip(): key_of(number, line) for number, line, _ in read_sentences(input_file)}
    return np.array([json.dumps(mapping)], dtype=h5py.string_dtype())


def _check_no_blank_lines(input_file):
    blank = [number for number, _, tokens in read_sentences(input_file) if not tokens]
    if blank:
        shown = ", ".join(str(n) for n in blank[:10]) + (" ..." if len(blank) > 10 else "")
        raise ValueError(
            f"{input_file}: {len(blank)} blank line(s) (0-based line numbers {shown}) have no sentence to "
            "use as their dataset name with use_sentence_keys. Remove them, or drop use_sentence_keys "
            "(--use_sentence_keys) to name datasets by line number (a blank line then gets an empty dataset).")


def embed_file(input_file, output_file, options_file, weight_file, output_format="all", batch_size=None,
               use_sentence_keys=False, resume=True, overwrite=False, verbose=1, *, start=None, warm_up=None,
               matmul_dtype="float32", model=None):
    """Writes the ELMo vectors of every line of `input_file` to `output_file`.

    Layout and naming as in this module's docstring. Lines are read as
    whitespace-tokenized UTF-8 sentences, batched by length (in sorted
    chunks of lines) and run through a
    stateless `BidirectionalLanguageModel`, every sentence starting from
    `start`, so the vectors do not depend on the batch size or on the other
    lines.

    Before any work it checks that the output is not an input (by any name)
    and replaces no file that bilm did not write as a sentence embedding
    file (unless `overwrite=True`). The file is written as
    `output_file + ".partial"` and renamed when complete; the `.partial`
    records what it is made from (the input's size and SHA-256, the weight
    file's and the options' hashes, `output_format`, `use_sentence_keys`,
    the start state, `matmul_dtype`). With `resume=True` a `.partial` made from the same is
    continued (lines it holds are not recomputed); one made from anything
    else is an error saying what changed. `resume=False` starts over. A
    finished `output_file` from an earlier run is recomputed and replaced.

    Args:
        input_file: text file, one sentence per line.
        output_file: HDF5 file to write (its directory is created if missing).
        options_file: the model's `options.json` (needs `char_cnn`).
        weight_file: HDF5 weights in the original layout.
        output_format: "all", "top" or "average".
        batch_size: sentences per model call, or None (the default) for
            calls of about `BULK_MAX_TOKENS` padded tokens, which amortise
            the kernel reads of every recurrent step over many rows.
        use_sentence_keys: name datasets by sentence instead of line number.
        resume: continue an interrupted run's `.partial` file.
        overwrite: replace an existing output that bilm did not write.
        verbose: show a progress bar (time per sentence, time left).
        start: where each sentence's LSTMs start: `"warm"` (the boundary
            state), `"zeros"`, or None for `"warm"` when the weights (or
            `warm_up`) give a boundary state, else `"zeros"`.
        warm_up: text (sentences, or a text file's path) to compute the
            boundary state from, for weights that carry none (see
            `bilm.models.boundary_state`).
        matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16 kernels
            (see `BidirectionalLanguageModel`).
        model: a stateless `BidirectionalLanguageModel` already loaded from
            these options and weights (e.g. `ELMo`'s), used instead of
            loading one; its boundary state and `matmul_dtype` are used.

    Returns:
        number of sentence datasets written by this call.
    """
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {sorted(OUTPUT_FORMATS)}. "
                         f"Received: output_format={output_format!r}")
    options = load_options(options_file)
    if options.char_cnn is None:
        raise ValueError(f"{options.source}: embed_file needs a character model (a 'char_cnn' section).")
    select = OUTPUT_FORMATS[output_format]
    key_of = _key_function(use_sentence_keys)
    settings = {"output_format": output_format, "use_sentence_keys": bool(use_sentence_keys),
                SENTENCE_TO_INDEX: True}
    return _embed_sentences_file(
        input_file, output_file, options, weight_file, select, key_of, settings,
        batch_size=batch_size, resume=resume, overwrite=overwrite, verbose=verbose,
        check_lines=_check_no_blank_lines if use_sentence_keys else None,
        extra_datasets=lambda: {SENTENCE_TO_INDEX: _sentence_to_index(input_file, key_of)}, start=start,
        warm_up=warm_up, matmul_dtype=matmul_dtype, model=model)


def dump_bilm_embeddings(vocab_file, dataset_file, options_file, weight_file, outfile, batch_size=None,
                         resume=True, overwrite=False, verbose=1, start=None, warm_up=None, matmul_dtype="float32"):
    """Writes every sentence's biLM layers to `outfile` (bilm-tf's dump layout).

    One dataset per line of `dataset_file`, named `str(line_number)`, shape
    `(n_layers + 1, n_tokens, 2 * projection_dim)`; an empty line gives
    `(n_layers + 1, 0, 2 * projection_dim)`. Sentences are batched by length
    and the model runs statelessly, so every sentence's result is independent
    of the others and of the batch size (the original ran one sentence at a
    time, carrying the LSTM state from one line to the next); `start`,
    `warm_up` and `matmul_dtype` are as in `embed_file`. `vocab_file` (optional) only caches
    character ids. The file is checked, written, resumed and stamped as
    `embed_file` does.

    Returns:
        number of sentence datasets written by this call.
    """
    options = load_options(options_file)
    if options.char_cnn is None:
        raise ValueError(f"{options.source}: dump_bilm_embeddings needs a character model ('char_cnn').")
    settings = {"output_format": "all", "use_sentence_keys": False, SENTENCE_TO_INDEX: False}
    return _embed_sentences_file(
        dataset_file, outfile, options, weight_file, lambda layers: layers, line_number_key, settings,
        vocab_file=vocab_file, batch_size=batch_size, resume=resume, overwrite=overwrite, verbose=verbose,
        start=start, warm_up=warm_up, matmul_dtype=matmul_dtype)


def _embed_sentences_file(input_file, output_file, options, weight_file, select, key_of, settings, *,
                          vocab_file=None, batch_size=None, resume=True, overwrite=False, verbose=1,
                          check_lines=None, extra_datasets=None, start=None, warm_up=None, matmul_dtype="float32",
                          model=None):
    """The run behind `embed_file` and `dump_bilm_embeddings`: checks, the
    stateless model (`model`, or one loaded after the checks), one dataset
    per line (`select` of its `(n_layers + 1, n_tokens, 2P)` layers)."""
    check_batch_size(batch_size)
    if not os.path.isfile(weight_file):
        raise WeightFileError(f"Weight file not found: {weight_file}")
    sources = (options.source, weight_file, vocab_file)
    if model is not None:
        _check_model(model, options)
        matmul_dtype = model.matmul_dtype
    check_matmul_dtype(matmul_dtype)
    SentenceEmbeddingFile.check_paths(input_file, output_file, sources, overwrite)  # before any work
    if warm_up is not None:
        if model is None:
            model = BidirectionalLanguageModel(options, weight_file, stateful=False, start="zeros",
                                               matmul_dtype=matmul_dtype)
        model.warm_up(warm_up)
    if model is not None:
        boundary_state = model.boundary_state
        if start is None and warm_up is None:
            start = model.start  # the model's own default (e.g. ELMo(start="zeros"))
    else:
        stored = read_boundary_state(weight_file)
        boundary_state = stored[0] if stored else None
    start = resolve_start(start, boundary_state is not None, weight_file)
    made_from = {**settings, "n_layers": options.n_layers, "projection_dim": options.projection_dim,
                 "weight_sha256": file_sha256(weight_file),
                 "options_sha256": json_sha256(options.for_prediction().to_dict()),
                 "start": start, "matmul_dtype": matmul_dtype,
                 "boundary_state_sha256": json_sha256(
                     {key: value.tolist() for key, value in boundary_state.items()}) if start == "warm" else ""}
    target = SentenceEmbeddingFile(input_file, output_file, made_from, inputs=sources, resume=resume,
                                   overwrite=overwrite, verbose=verbose)
    if check_lines is not None:
        check_lines(input_file)
    if model is None:
        model = BidirectionalLanguageModel(options, weight_file, stateful=False, start=start,
                                           matmul_dtype=matmul_dtype)
    batcher = Batcher(vocab_file, options.char_cnn.max_characters_per_token)

    def embed(sentences):
        layers = model(batcher.batch_sentences(sentences), start=start)["lm_embeddings"].numpy()
        return [select(layers[i, :, :len(tokens)]) for i, tokens in enumerate(sentences)]

    written = target.write(embed, batch_size=batch_size, key_of=key_of, extra_datasets=extra_datasets)
    if target.n_lines == 0:
        warnings.warn(f"{input_file} is empty: wrote {output_file} with no sentence datasets.", stacklevel=3)
    return written


def _check_model(model, options):
    """A model passed in must be the stateless one these options build (the
    file records a zero start and the options' hash)."""
    if model.stateful:
        raise ValueError("model must be stateless (BidirectionalLanguageModel(..., stateful=False)): the file "
                         "records that every sentence starts from zero states.")
    if model.options != options.for_prediction():
        raise ValueError(f"model was built from other options than {options.source}; pass the model of "
                         "these options and weights, or model=None to load one.")


def add_embedding_run_arguments(parser, output_name="OUTPUT"):
    """The flags that `bin/elmo.py` and `bin/dump_bilm_embeddings.py` share:
    how the model runs and how the output file is written."""
    parser.add_argument("--batch_size", type=int,
                        help="Sentences per model call (default: calls of about 4,096 tokens, sentences "
                             "batched by length).")
    parser.add_argument("--start", choices=STARTS,
                        help="Where each sentence's LSTMs start: warm, the boundary state (the mean state at "
                             "sentence starts in training, stored by bilm's training or made by --warm_up), or "
                             "zeros (default: warm when there is a boundary state, else zeros).")
    parser.add_argument("--warm_up", metavar="FILE",
                        help="Compute the boundary state from the first 1,000 sentences of this text file "
                             "(one per line), for weights that carry none, such as the published ones.")
    parser.add_argument("--matmul_dtype", choices=MATMUL_DTYPES, default="float32",
                        help="bfloat16: keep the model's kernels in bfloat16 (faster on CPUs and GPUs with "
                             "bfloat16 matmuls; vectors within 3%% of float32's, see docs/performance.md).")
    parser.add_argument("--no_resume", dest="resume", action="store_false",
                        help=f"Start over instead of continuing {output_name}.partial from an interrupted run.")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"Replace an existing {output_name} (or {output_name}.partial) that bilm did not "
                             "write.")
