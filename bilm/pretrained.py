"""`load` and `ELMo`: a published ELMo model in one call, and its vectors for your sentences."""
import os

import numpy as np

from bilm.errors import UserError
from bilm.export.sentence_embeddings import write_embeddings
from bilm.io.formats.embedding_files import OUTPUT_FORMATS
from bilm.io.formats.output_files import check_output_file
from bilm.io.formats.sentence_files import check_batch_size, length_sorted_batches
from bilm.io.formats.weight_file import WEIGHTS_KIND, copy_with_boundary_state
from bilm.io.sources.model_files import locate_model, options_file_beside
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.boundary_state import DEFAULT_N_SENTENCES
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.network_calls import to_numpy
from bilm.models.text_inputs import batcher_for
from bilm.options import holds_options, load_options, save_options
from bilm.text.whitespace import split_tokens
from bilm.utils.deprecation import deprecated_alias, renamed_argument
from bilm.utils.progress import Progress

# verbose="auto" shows a progress bar for inputs of at least this many sentences.
AUTO_PROGRESS_SENTENCES = 1000


def load(path, *, cache_dir=None, sha256=None, start=None, warm_up=None, kernel_dtype=None, mirror=None,
         matmul_dtype=None):
    """The ELMo model at `path`, ready to embed sentences.

    `path` (str or path-like) may be:
    - a directory holding an options file and its HDF5 weights (bilm's,
      AllenNLP's, the NLPL repository's layouts), or a model of another
      family, converted once into the cache: an ELMoForManyLangs folder or a
      TF1 Hub module of ELMo (see `bilm.io.sources.model_files`);
    - the options or weight file of one of several models in a directory;
    - a `.zip` or tar archive of such a directory, extracted once into the
      cache, or its `http(s)://` URL, downloaded once;
    - a published model's name, `<family>:<name>` (`allennlp:original-5.5b`,
      `nlpl:209`, `efml:fi`, ...), its files downloaded once into the cache;
      a local file or directory of that name is opened instead. The names
      are `bilm.io.sources.published_models.PUBLISHED_MODELS`, listed in
      docs/models.md; an AllenNLP name without its prefix (`small`) still
      works, with a `DeprecationWarning`. None stores a boundary state:
      give them `warm_up=` text.

    Args:
        path: see above.
        cache_dir: where downloads, extracted archives and converted models
            are kept; default `$BILM_CACHE`, else `~/.cache/bilm` (see
            `bilm.io.sources.model_cache`).
        sha256: the archive's expected SHA-256 (hex), checked on every load.
        start: where `embed` starts each sentence by default (see `ELMo`).
        warm_up: for weights without a boundary state (every published
            model): your own text, a list of sentences or a text file's
            path, from which `ELMo.warm_up` computes one.
        kernel_dtype: the dtype the large kernels are stored in: `"float32"`
            (None: the same), `"bfloat16"`, or `"int8"` with per-column
            scales (see `ELMo`).
        mirror: for a published model's name, a URL or a local directory
            holding its files under the path of their official URLs
            (see `bilm.io.sources.published_models`); default `$BILM_MODEL_MIRROR`.
        matmul_dtype: deprecated, the old name of `kernel_dtype`.

    Returns:
        `ELMo`.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError (`ModelFileError`, `OptionsError`, `WeightFileError`):
            what is at `path` is not a model bilm reads, or is incomplete,
            contradictory or a variant bilm does not run; `path` is neither
            a path nor a published name; a download failed; an archive or
            HDF5 file is corrupt. The message names the file, URL or name.

    Example:
    ```python
    elmo = bilm.load("allennlp:original-5.5b", warm_up="my_corpus.txt")   # or a directory, a zip, its URL
    vectors = elmo.embed([["The", "cat", "sat"], ["Hi"]])  # [(3, 2P), (1, 2P)]
    ```
    """
    kernel_dtype = renamed_argument("kernel_dtype", kernel_dtype, "matmul_dtype", matmul_dtype, "float32")
    files = locate_model(path, cache_dir=cache_dir, sha256=sha256, mirror=mirror)
    return ELMo(files.options_file, files.weight_file, metadata=files.metadata, start=start, warm_up=warm_up,
                kernel_dtype=kernel_dtype)


class ELMo:
    """A pretrained character biLM that turns sentences into ELMo vectors.

    Every sentence is embedded on its own: the LSTMs start each sentence
    from `start` (the boundary state, see `warm_up`, or zero states), so a
    sentence's vectors never depend on the other sentences of the call or
    on earlier calls (up to float round-off of differently sized batches).
    Sentences are batched by length inside; each distinct token's encoding
    is computed once and kept across calls.

    Args:
        options_file: the model's options (path, dict or `BiLMOptions`; it
            needs a `char_cnn` section).
        weight_file: HDF5 weights in the original bilm-tf layout.
        metadata: what is known about the model (NLPL's `meta.json`), or None.
        token_cache_size: token encodings kept across calls (see
            `BidirectionalLanguageModel`).
        start: where `embed` starts each sentence by default: `"warm"`,
            `"zeros"`, or None for `"warm"` when there is a boundary state
            (stored in the weight file, or made from `warm_up`).
        warm_up: your own text (sentences, or a text file's path) to
            compute a boundary state from, see `warm_up`.
        kernel_dtype: `"float32"` (None: the same), `"bfloat16"` to keep the
            kernels in bfloat16 (half the bytes; vectors within
            `BFLOAT16_INFERENCE_TOLERANCE` of float32's), or `"int8"` to keep
            them in int8 with a float32 scale per output column (a quarter
            of the bytes; within `INT8_INFERENCE_TOLERANCE`). One sentence
            at a time at the original size both are faster than float32 on
            an AVX2 CPU (measured; not at the small size, whose kernels fit
            in cache); in
            large batches bfloat16 is faster where the hardware has
            bfloat16 matmuls (see `bilm.ops.matmul_dtype`).
        matmul_dtype: deprecated, the old name of `kernel_dtype`.

    Attributes:
        options: the parsed options, prediction form (`BiLMOptions`).
        metadata: as given (`load` passes `meta.json`'s dict), or None.
        language_model: the stateless `BidirectionalLanguageModel`
            underneath (`bilm`: its deprecated old name).
        network: its Keras functional network (`language_model.network`).
        kernel_dtype: as given (`matmul_dtype`: its deprecated old name).
        dim: size of every vector, `2 * projection_dim` (2P below).
        n_layers: LSTM layers; "all" holds `n_layers + 1` layers.

    Example:
    ```python
    elmo = ELMo("options.json", "weights.hdf5")
    elmo.embed(["The cat sat", "Hi"], layers="all")[0].shape  # (3, 3, 2P)
    elmo.sentence_vectors(["The cat sat", "Hi"]).shape  # (2, 2P)
    ```
    """

    def __init__(self, options_file, weight_file, metadata=None, token_cache_size=50_000, start=None,
                 warm_up=None, kernel_dtype=None, matmul_dtype=None):
        kernel_dtype = renamed_argument("kernel_dtype", kernel_dtype, "matmul_dtype", matmul_dtype, "float32")
        options = load_options(options_file)
        if options.char_cnn is None:
            raise UserError(
                f"{options.source}: this biLM reads token ids (its options have no 'char_cnn' section); ELMo "
                "reads character models. Use BidirectionalLanguageModel(options_file, weight_file, "
                "use_character_inputs=False, embedding_weight_file=...) with a TokenBatcher.")
        self.options_file = options_file
        self.weight_file = os.fspath(weight_file)
        self.metadata = metadata
        self.language_model = BidirectionalLanguageModel(
            options, self.weight_file, stateful=False, token_cache_size=token_cache_size, start=start,
            warm_up=warm_up, kernel_dtype=kernel_dtype)
        self.options = self.language_model.options
        self.kernel_dtype = self.language_model.kernel_dtype
        self.dim = 2 * self.options.projection_dim
        self.n_layers = self.options.n_layers
        self._batcher = batcher_for(self.options)

    def __repr__(self):
        return (f"ELMo(options_file={self.options_file!r}, weight_file={self.weight_file!r}, "
                f"n_layers={self.n_layers}, dim={self.dim}, kernel_dtype={self.kernel_dtype!r})")

    def embed(self, sentences, layers="average", *, start=None, batch_size=None, verbose="auto"):
        """The ELMo vectors of every token of every sentence.

        Args:
            sentences: a list (or any iterable) of sentences, each a list of
                tokens or a string split on whitespace (`str.split()`).
            layers: what each sentence's array holds:
                `"average"` `(n_tokens, 2P)`, the mean of the `n_layers + 1` layers;
                `"all"` `(n_layers + 1, n_tokens, 2P)`, every layer: 0 is the
                token encoding (the context-free `[x, x]`), l is
                `[forward_l, backward_l]` of LSTM layer l;
                `"top"` `(n_tokens, 2P)`, the last layer;
                an int k in `[0, n_layers]` `(n_tokens, 2P)`, layer k.
            start: the LSTM states each sentence starts from: `"warm"`
                (the boundary state: where the model stood at sentence
                starts in training), `"zeros"`, or None for the model's
                default (`"warm"` when it has a boundary state, stored in
                its weight file or made by `warm_up`, else `"zeros"`).
            batch_size: sentences per model call, or None (the default) for
                calls of about `BULK_MAX_TOKENS` padded tokens.
            verbose: 1 shows a progress bar, 0 none; `"auto"` shows one for
                inputs of at least `AUTO_PROGRESS_SENTENCES` sentences.

        Returns:
            a list of float32 arrays, one per sentence, in input order. An
            empty sentence gives arrays with 0 tokens. On an NVIDIA GPU of
            the Ampere generation or later, TensorFlow runs float32 matmuls
            in TF32 by default (about 1e-3 from float32); bilm leaves that
            process-wide switch to you:
            `tf.config.experimental.enable_tensor_float_32_execution(False)`
            gives float32 round-off there too (`bin/elmo.py` turns TF32 off
            unless `--tf32`). See docs/gpu.md.

        Raises:
            TypeError: `sentences` is a string, or a sentence or token is
                not a string / list of strings.
            ValueError: a bad `layers`, `start` or `batch_size`.
        """
        select = self._selector(layers)
        results = {}
        for index, sentence_layers in self._layers_of_each(sentences, start, batch_size, verbose):
            results[index] = select(sentence_layers)
        return [results[index] for index in range(len(results))]

    def embed_sentence(self, sentence, layers="average", *, start=None):
        """`embed([sentence], layers)[0]`: one sentence (tokens or a string)."""
        return self.embed([sentence], layers, start=start, verbose=0)[0]

    def sentence_vectors(self, sentences, *, start=None, batch_size=None, verbose="auto"):
        """One vector per sentence: the mean over its tokens of `embed(..., "average")`.

        Args:
            sentences, start, batch_size, verbose: as in `embed`.

        Returns:
            float32 `(n_sentences, 2P)`; zeros for an empty sentence.
        """
        rows = {}
        for index, sentence_layers in self._layers_of_each(sentences, start, batch_size, verbose):
            if sentence_layers.shape[1]:
                rows[index] = sentence_layers.mean(axis=0).mean(axis=0)
            else:
                rows[index] = np.zeros(self.dim, np.float32)
        return np.stack([rows[index] for index in range(len(rows))]) if rows else np.zeros((0, self.dim), np.float32)

    def embed_file(self, input_file, output_file, layers="all", *, batch_size=None, use_sentence_keys=False,
                   start=None, resume=True, overwrite=False, verbose=1):
        """Writes the vectors of every line of `input_file` to HDF5, as `bin/elmo.py` does.

        The file's layout, naming, safety checks and resuming are those of
        `bilm.export.write_embeddings` (the same file as `bin/elmo.py` for
        the same arguments), run on this already loaded model.

        Args:
            input_file: text, one whitespace-tokenized sentence per line.
            output_file: the HDF5 file to write.
            layers: `"all"`, `"top"` or `"average"` (as in `embed`).
            batch_size, start: as in `embed`.
            use_sentence_keys, resume, overwrite, verbose: as in
                `bilm.export.write_embeddings`.

        Returns:
            number of sentence datasets written by this call.
        """
        if layers not in OUTPUT_FORMATS:
            raise UserError(f"layers must be one of {sorted(OUTPUT_FORMATS)} for a file. Received: layers={layers!r}")
        return write_embeddings(self.language_model, input_file, output_file, layers, batch_size=batch_size,
                                use_sentence_keys=use_sentence_keys, start=start, resume=resume, overwrite=overwrite,
                                verbose=verbose)

    matmul_dtype = deprecated_alias("matmul_dtype", "kernel_dtype")
    bilm = deprecated_alias("bilm", "language_model")

    @property
    def network(self):
        """The Keras functional network of the biLM (`language_model.network`)."""
        return self.language_model.network

    @property
    def start(self):
        """Where `embed` starts each sentence by default: `"warm"` or `"zeros"`."""
        return self.language_model.start

    @property
    def boundary_state(self):
        """`{state key: float32 (size,)}`, or None before a `warm_up` of weights without one."""
        return self.language_model.boundary_state

    def warm_up(self, sentences, n_sentences=DEFAULT_N_SENTENCES, save_to=None, overwrite=False):
        """Computes the boundary state from your own text; `embed` then starts every sentence from it.

        The published weights carry no boundary state (bilm's own training
        stores one). This runs the first `n_sentences` sentences of your text
        through the model, carried line to line as in training, and averages
        the LSTM states at the sentence starts (`bilm.models.boundary_state`).
        The copy written to `save_to` gets the model's options beside it
        (`<save_to stem>_options.json`), so `bilm.load` opens it.

        Args:
            sentences: consecutive sentences (strings or token lists), or
                the path of a text file with one sentence per line.
            n_sentences: sentence starts averaged.
            save_to: also write a copy of the weight file holding the state
                there (an HDF5 weight file that loads as the original does,
                and then starts warm without a warm-up).
            overwrite: replace an existing `save_to` that bilm did not write
                as a weight file, and an options file beside it that holds
                other options.

        Returns:
            the number of sentence starts averaged.
        """
        if save_to is not None:  # before the work
            inputs = [self.weight_file, self.options.source]
            check_output_file(save_to, inputs, kind=WEIGHTS_KIND, overwrite=overwrite)
            check_output_file(options_file_beside(save_to), inputs + [save_to], overwrite=overwrite,
                              content=holds_options(self.options))
        n_starts = self.language_model.warm_up(sentences, n_sentences)
        if save_to is not None:
            copy_with_boundary_state(self.weight_file, save_to, self.language_model.boundary_state, n_starts,
                                     overwrite=overwrite)
            save_options(self.options, options_file_beside(save_to))
        return n_starts

    def keras_layer(self, output="elmo", **kwargs):
        """An `ELMoEmbedding` Keras layer on this model's files and boundary state.

        Args:
            output: `"elmo"`, `"word_emb"`, `"lstm_outputs1"`, ..., `"default"`
                or `"all"` (see `ELMoEmbedding`).
            **kwargs: the other arguments of `ELMoEmbedding` (its `start`
                and `kernel_dtype` default to this model's; `matmul_dtype`
                is the deprecated old name of `kernel_dtype`).

        Returns:
            a new `ELMoEmbedding` (its own copy of the weights, read from
            `weight_file`).
        """
        kwargs.setdefault("start", self.start)
        kwargs["kernel_dtype"] = renamed_argument("kernel_dtype", kwargs.pop("kernel_dtype", None), "matmul_dtype",
                                                  kwargs.pop("matmul_dtype", None), self.kernel_dtype)
        if self.boundary_state is not None:
            kwargs.setdefault("boundary_state", self.boundary_state)
        return ELMoEmbedding.from_files(self.options, self.weight_file, output=output, **kwargs)

    # === Internals ===

    def _layers_of_each(self, sentences, start, batch_size, verbose):
        """Yields `(input index, (n_layers + 1, n_tokens, 2P) view)` for every
        sentence, in length-sorted chunks (see `length_sorted_batches`), so
        memory holds one chunk of inputs and one batch of outputs at a time.
        The views point into the batch's array; callers copy what they keep."""
        if isinstance(sentences, (str, bytes)):
            raise TypeError(
                "sentences must be a list of sentences (strings or token lists). Received a "
                f"{type(sentences).__name__}: {sentences[:50]!r}; for one sentence pass [sentence] or use "
                "embed_sentence.")
        self.language_model.start_states(start)  # checks `start` before any work
        check_batch_size(batch_size)
        total = len(sentences) if hasattr(sentences, "__len__") else None
        if verbose == "auto":
            verbose = int(total is not None and total >= AUTO_PROGRESS_SENTENCES)
        elif verbose not in (0, 1):
            raise UserError(f"verbose must be 0, 1 or 'auto'. Received: verbose={verbose!r}")
        empty = np.zeros((self.n_layers + 1, 0, self.dim), np.float32)
        items = ((index, _tokens(sentence, index)) for index, sentence in enumerate(sentences))
        progress = Progress(total, unit="sentence", verbose=verbose)
        done = 0
        try:
            for batch in length_sorted_batches(items, batch_size, tokens_of=lambda item: item[1]):
                filled = [(index, tokens) for index, tokens in batch if tokens]
                for index, tokens in batch:
                    if not tokens:
                        yield index, empty
                if filled:
                    ids = self._batcher.batch_sentences([tokens for _, tokens in filled])
                    layers = to_numpy(self.language_model(ids, start=start)["lm_embeddings"])
                    for row, (index, tokens) in enumerate(filled):
                        yield index, layers[row, :, :len(tokens)]
                done += len(batch)
                progress.update(done)
        finally:
            progress.close()

    def _selector(self, layers):
        """`(n_layers + 1, n_tokens, 2P)` view -> the new array `layers` asks for."""
        if isinstance(layers, str) and layers in OUTPUT_FORMATS:
            if layers == "average":
                return OUTPUT_FORMATS["average"]
            return lambda sentence_layers: OUTPUT_FORMATS[layers](sentence_layers).copy()
        if isinstance(layers, (int, np.integer)) and not isinstance(layers, bool) and 0 <= layers <= self.n_layers:
            return lambda sentence_layers: sentence_layers[layers].copy()
        raise UserError(f"layers must be 'average', 'all', 'top' or a layer number 0-{self.n_layers}. "
                         f"Received: layers={layers!r}")


def _tokens(sentence, index):
    """A sentence's tokens: a string split on whitespace, or its list of string tokens."""
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
