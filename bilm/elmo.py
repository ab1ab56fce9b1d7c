"""`ELMo`: a pretrained character biLM that turns sentences into ELMo vectors (`bilm.load` opens one)."""
import os

import numpy as np

from bilm.errors import UserError
from bilm.export.sentence_embeddings import write_embeddings
from bilm.io.formats.embedding_files import OUTPUT_FORMATS
from bilm.io.formats.output_files import check_output_file
from bilm.io.formats.weight_file import WEIGHTS_KIND, copy_with_boundary_state
from bilm.io.sources.model_files import options_file_beside
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models.boundary_state import DEFAULT_N_SENTENCES
from bilm.models.elmo_embedding import ELMoEmbedding
from bilm.models.embedding_settings import EmbeddingSettings
from bilm.models.sentence_layers import in_input_order, layer_selector
from bilm.models.text_inputs import batcher_for
from bilm.options import holds_options, load_options, save_options
from bilm.utils.deprecation import deprecated_alias, renamed_argument


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
        token_cache_size, start, warm_up, kernel_dtype: the token encodings
            kept across calls; where `embed` starts each sentence by default
            (`"warm"`, `"zeros"`, or None: `"warm"` when there is a boundary
            state); text to compute a boundary state from (see `warm_up`); the
            large kernels' dtype. See `bilm.models.embedding_settings`.
        matmul_dtype: deprecated, the old name of `kernel_dtype`.

    Attributes:
        options: the parsed options, prediction form (`BiLMOptions`).
        metadata: as given (`load` passes `meta.json`'s dict), or None.
        settings: the `EmbeddingSettings` it was made with.
        language_model: the stateless `BidirectionalLanguageModel`
            underneath (`bilm`: its deprecated old name).
        network: its Keras functional network (`language_model.network`).
        kernel_dtype: as given (`matmul_dtype`: its deprecated old name).
        dim, n_layers: size of every vector, `2 * projection_dim` (2P below); LSTM layers ("all": `n_layers + 1`).

    Example:
    ```python
    elmo = ELMo("options.json", "weights.hdf5")
    elmo.embed(["The cat sat", "Hi"], layers="all")[0].shape  # (3, 3, 2P)
    elmo.sentence_vectors(["The cat sat", "Hi"]).shape  # (2, 2P)
    ```
    """

    def __init__(self, options_file, weight_file, metadata=None, token_cache_size=50_000, start=None,
                 warm_up=None, kernel_dtype=None, matmul_dtype=None):
        self._set_up(options_file, weight_file, metadata, EmbeddingSettings.of(
            token_cache_size=token_cache_size, start=start, warm_up=warm_up, kernel_dtype=kernel_dtype,
            matmul_dtype=matmul_dtype))

    @classmethod
    def from_settings(cls, options_file, weight_file, settings, metadata=None):
        """The model of these files with `settings`, an `EmbeddingSettings` (`load`'s, the Beam handler's)."""
        elmo = cls.__new__(cls)
        elmo._set_up(options_file, weight_file, metadata, settings)
        return elmo

    def _set_up(self, options_file, weight_file, metadata, settings):
        options = load_options(options_file)
        if options.char_cnn is None:
            raise UserError(
                f"{options.source}: this biLM reads token ids (its options have no 'char_cnn' section); ELMo "
                "reads character models. Use BidirectionalLanguageModel(options_file, weight_file, "
                "use_character_inputs=False, embedding_weight_file=...) with a TokenBatcher.")
        self.options_file = options_file
        self.weight_file = os.fspath(weight_file)
        self.metadata = metadata
        self.settings = settings
        self.language_model = BidirectionalLanguageModel.from_settings(options, self.weight_file, settings)
        self.options = self.language_model.options
        self.kernel_dtype = self.language_model.kernel_dtype
        self.dim, self.n_layers = 2 * self.options.projection_dim, self.options.n_layers
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
                inputs of at least `AUTO_PROGRESS_SENTENCES` sentences
                (`bilm.models.sentence_layers`).

        Returns:
            a list of float32 arrays, one per sentence, in input order. An
            empty sentence gives arrays with 0 tokens. (On an Ampere or later
            NVIDIA GPU TensorFlow's float32 matmuls are TF32 unless you turn
            that process-wide switch off: docs/gpu.md.)

        Raises:
            TypeError: `sentences` is a string, or a sentence or token is not a string / list of strings.
            ValueError: a bad `layers`, `start` or `batch_size`.
        """
        return in_input_order(self.language_model, self._batcher, sentences, layer_selector(layers, self.n_layers),
                              start=start, batch_size=batch_size, verbose=verbose)

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
        rows = in_input_order(self.language_model, self._batcher, sentences, lambda layers: (
            layers.mean(axis=0).mean(axis=0) if layers.shape[1] else np.zeros(self.dim, np.float32)),
            start=start, batch_size=batch_size, verbose=verbose)
        return np.stack(rows) if rows else np.zeros((0, self.dim), np.float32)

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
