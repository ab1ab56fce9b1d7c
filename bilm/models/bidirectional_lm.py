"""`BidirectionalLanguageModel`: the pretrained biLM for prediction, with state buffers."""
import os
import types

import numpy as np
from keras import ops

from bilm.backend import fast_layer_call
from bilm.errors import UserError
from bilm.models.boundary_state import DEFAULT_N_SENTENCES
from bilm.models.embedding_settings import EmbeddingSettings
from bilm.models.functional_bilm import state_keys
from bilm.models.portable_calls import PortableCalls
from bilm.models.prediction_network import load_prediction_bilm
from bilm.models.start_state import resolve_start
from bilm.options import load_options
from bilm.utils.deprecation import deprecated_alias


class BidirectionalLanguageModel:
    """A pretrained biLM for prediction: ids in, ELMo layers out.

    Stateful as the original: the LSTM states of every direction and layer
    live in buffers of `max_batch_size` rows. A batch of B rows starts from
    rows [0, B) and afterwards those rows hold each row's state at its last
    valid token; rows >= B are untouched. The first batch starts from zeros.
    `stateful=False` starts every sentence from `start` instead, so a
    sentence's output depends on that sentence only: `"warm"`, the boundary
    state (see `bilm.models.boundary_state`), or `"zeros"`.

    Args:
        options_file: path to `options.json` (or a dict / `BiLMOptions`).
        weight_file: HDF5 weights in the original layout.
        use_character_inputs: char ids from `Batcher` (True) or token ids
            from `TokenBatcher` (False, needs `embedding_weight_file`).
        embedding_weight_file: HDF5 with `embedding` (n_vocab, P), e.g. from
            `dump_token_embeddings`.
        stateful: carry states between calls.
        max_batch_size: rows of the state buffers; a larger batch is an
            error when `stateful` (a stateless model takes any batch).
        token_cache_size: char inputs given as NumPy arrays (or eager
            tensors) are encoded once per distinct token and the encodings
            kept for later calls, up to this many tokens (`projection_dim`
            floats each); 0 encodes every batch from scratch. On TensorFlow
            outside a `tf.function`; on JAX and PyTorch each call encodes its
            batch, compiled.
        start, boundary_state, warm_up, kernel_dtype: where a stateless
            model starts each sentence, the boundary state behind `"warm"`
            (None: the one `weight_file` stores, if any), the text to compute
            one from, and the dtype of the large kernels; see
            `bilm.models.embedding_settings`. A stateful model carries its
            states and takes no `start`.
        matmul_dtype: deprecated, the old name of `kernel_dtype`.

    Attributes:
        boundary_state: `{state key: float32 (size,)}` or None.
        start: the start of a stateless model (None when stateful).
        weight_file: the weight file's path, or None.
        settings: the `EmbeddingSettings` it was made with.
        kernel_dtype: as given (`matmul_dtype`: its deprecated old name).
        network: the Keras functional network of `build_bilm` holding the
            weights (`model`: its deprecated old name).
        state_buffers: `{state key: variable (max_batch_size, size)}`;
            `variables` lists them.
        calls: the backend's calls (`bilm.models.portable_calls.PortableCalls`,
            or TensorFlow's `language_model_calls.TensorFlowCalls`), each with
            its `token_cache`, chosen once.

    Call arguments:
        ids: int `(batch, time, options.token_id_width)` char ids (see
            `bilm.models.text_inputs.batcher_for`) or `(batch, time)` token
            ids, numpy or tensor, boundaries included.

    Returns:
        dict of tensors, see `elmo_outputs`.

    Example:
        >>> batcher = Batcher("vocab.txt", 50)
        >>> bilm = BidirectionalLanguageModel("options.json", "weights.hdf5")
        >>> out = bilm(batcher.batch_sentences([["The", "cat", "."]]))
        >>> out["lm_embeddings"].shape   # (1, 3, 3, 2P)
    """

    def __init__(self, options_file, weight_file, use_character_inputs=True,
                 embedding_weight_file=None, max_batch_size=128, stateful=True,
                 token_cache_size=50_000, start=None, boundary_state=None, warm_up=None,
                 kernel_dtype=None, matmul_dtype=None):
        settings = EmbeddingSettings.of(start=start, warm_up=warm_up, boundary_state=boundary_state,
                                        kernel_dtype=kernel_dtype, max_batch_size=max_batch_size,
                                        token_cache_size=token_cache_size, matmul_dtype=matmul_dtype)
        self._set_up(options_file, weight_file, settings, stateful, use_character_inputs, embedding_weight_file)

    @classmethod
    def from_settings(cls, options_file, weight_file, settings, *, stateful=False, use_character_inputs=True,
                      embedding_weight_file=None):
        """The model of these files with `settings` (an `EmbeddingSettings`); the other arguments as the
        constructor's (here stateless by default)."""
        model = cls.__new__(cls)
        model._set_up(options_file, weight_file, settings, stateful, use_character_inputs, embedding_weight_file)
        return model

    def _set_up(self, options_file, weight_file, settings, stateful, use_character_inputs, embedding_weight_file):
        options = load_options(options_file).for_prediction(use_character_inputs)
        if not use_character_inputs and embedding_weight_file is None:
            raise UserError(
                "use_character_inputs=False needs embedding_weight_file= (an HDF5 file with an "
                "'embedding' dataset, e.g. written by dump_token_embeddings).")
        if stateful and settings.start is not None:
            _refuse_start_of_stateful(settings.start)
        self.settings = settings
        self.options = options
        self.use_character_inputs = use_character_inputs
        self.max_batch_size = settings.max_batch_size
        self.stateful = stateful
        self.kernel_dtype = settings.kernel_dtype
        self.network = load_prediction_bilm(options, weight_file, embedding_weight_file, settings.kernel_dtype)
        self.n_token_vocab = None if use_character_inputs else self.network.get_layer("token_embedding").input_dim
        self.network.trainable = False
        self.input_key = "token_characters" if use_character_inputs else "token_ids"
        self.state_keys = state_keys(options)
        self.weight_file = None if weight_file is None else os.fspath(weight_file)
        # A stateful model only keeps the boundary state; its start is unused.
        self._requested_start = "zeros" if stateful else settings.start
        self._start_state = resolve_start(options, self._requested_start, boundary_state=settings.boundary_state,
                                          weight_file=self.weight_file, warm_up=settings.warm_up,
                                          network=self.network)
        self._kept_start_tensors = types.SimpleNamespace(state=None, tensors=None)
        # The backend's own calls (TensorFlow's tf.functions and token cache), else the portable ones.
        self.calls = (fast_layer_call("language_model") or PortableCalls)(self, settings.token_cache_size)

    def __call__(self, ids, start=None):
        """See the class docstring; `start` overrides the model's `start`
        for this call (stateless models only)."""
        return self.calls(self._check_ids(ids), self.stateful, start)

    matmul_dtype = deprecated_alias("matmul_dtype", "kernel_dtype")
    model = deprecated_alias("model", "network")

    @property
    def state_buffers(self):
        """`{state key: variable (max_batch_size, size)}`: each row's LSTM states after its last call."""
        return self.calls.state_buffers

    @property
    def variables(self):
        """The state buffers, a tuple (the network's weights are `network`'s)."""
        return tuple(self.state_buffers.values())

    @property
    def trainable_variables(self):
        """`()`: the model predicts, nothing in it trains."""
        return ()

    @property
    def token_cache(self):
        """The calls' `TokenEncodingCache` (a character model's, `token_cache_size` > 0), or None."""
        return self.calls.token_cache

    @property
    def start(self):
        """`"warm"` or `"zeros"` for a stateless model, None for a stateful one."""
        return None if self.stateful else self._start_state.start

    @property
    def boundary_state(self):
        """`{state key: float32 (size,)}`, or None."""
        return self._start_state.boundary_state

    def start_state(self, start=None):
        """The `StartState` of a call with `start` (None: the model's own)."""
        if start is None:
            return self._start_state
        if self.stateful:
            _refuse_start_of_stateful(start)
        return resolve_start(self.options, start, boundary_state=self.boundary_state, source="this model")

    def start_states(self, start=None):
        """`{state key: float32 (size,)}` each sentence starts from: the
        boundary state for `"warm"`, zeros for `"zeros"`; None: `self.start`."""
        return self.start_state(start).vectors(self.options)

    def start_tensors(self, start):
        """`start_states(start)` as tensors, kept while the start state is the
        same: each eager call would otherwise convert the arrays anew."""
        state, kept = self.start_state(start), self._kept_start_tensors
        if kept.state is not state:
            kept.state = state
            kept.tensors = {key: ops.convert_to_tensor(vector, "float32")
                            for key, vector in state.vectors(self.options).items()}
        return kept.tensors

    def set_start(self, start=None, boundary_state=None):
        """Sets where a stateless model starts each sentence (see `start`),
        with a new `boundary_state` if one is given."""
        if self.stateful and start is not None:
            _refuse_start_of_stateful(start)
        if not self.stateful:
            self._requested_start = start
        self._start_state = resolve_start(self.options, self._requested_start,
                                          boundary_state=boundary_state or self.boundary_state, source="this model")

    def warm_up(self, sentences, n_sentences=DEFAULT_N_SENTENCES):
        """Computes the boundary state from your own text and starts from it.

        Args:
            sentences: consecutive sentences of text (lists of tokens, or
                strings split on whitespace), or the path of a text file
                with one sentence per line; the first `n_sentences` (plus a
                few to settle the states) are read, carried line to line as
                in training (see `compute_boundary_state`).
            n_sentences: sentence starts averaged.

        Returns:
            the number of sentence starts averaged. Afterwards
            `boundary_state` holds the new state and a stateless model whose
            `start` was left to its default starts from it.
        """
        if not self.use_character_inputs:
            raise UserError("warm_up needs a character biLM; a token-input one would need its vocabulary. "
                            "Compute the state with bilm.models.compute_boundary_state.")
        self._start_state = resolve_start(self.options, self._requested_start, warm_up=sentences,
                                          network=self.network, n_sentences=n_sentences, source="this model")
        return self._start_state.n_starts

    def reset_states(self):
        """Sets every state buffer back to zeros (the next batch starts fresh)."""
        for buffer in self.state_buffers.values():
            buffer.assign(np.zeros(buffer.shape, np.float32))

    def _check_ids(self, ids):
        """Validates ids eagerly so bad input is a clear error, not a shape trace."""
        if isinstance(ids, (list, tuple)):
            ids = np.asarray(ids)
        dtype = getattr(ids, "dtype", None)
        if dtype is not None and not (np.issubdtype(np.dtype(getattr(dtype, "as_numpy_dtype", dtype)),
                                                    np.integer)):
            raise TypeError(f"ids must be integers (from Batcher/TokenBatcher). Received dtype {dtype}.")
        return self.calls.check_ids(ids)

    def id_limits(self):
        """`(token_id_width or None, n_token_vocab, most rows a batch may have or None)` for `bilm.models.id_checks`."""
        width = self.options.token_id_width if self.use_character_inputs else None
        return width, self.n_token_vocab, self.max_batch_size if self.stateful else None


def _refuse_start_of_stateful(start):
    raise UserError(f"start={start!r} is for a stateless model (stateful=False); a stateful one carries its "
                     "states from one batch to the next.")
