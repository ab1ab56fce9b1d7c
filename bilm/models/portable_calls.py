"""A `BidirectionalLanguageModel`'s calls on the portable path (every backend; TensorFlow's own are
`bilm.backend.tensorflow.language_model_calls`): the network compiled as its backend compiles it
(`inference_call`), over NumPy ids, with the state buffers read and written in between; a character model with a
token cache encodes each distinct token once and keeps its encoding for later calls."""
import keras
import numpy as np
from keras import ops

from bilm.backend import backend_module
from bilm.models.elmo_outputs import elmo_outputs
from bilm.models.functional_bilm import build_contextual_bilm
from bilm.models.id_checks import check_id_values
from bilm.models.network_calls import inference_call, padded_batch, padded_ids, unpadded_elmo_outputs
from bilm.models.token_cache import TokenEncodingCache
from bilm.models.token_encoding import build_token_encoder, widest_filter
from bilm.ops.char_convolutions_portable import needed_columns

# On JAX, which compiles a program per input shape, a call's new words are encoded in chunks of
# `ENCODED_CHUNK_ROWS` rows, the last padded to that many, or to `ENCODED_ROWS_AT_LEAST` where it holds no more:
# two programs (of each width) whatever the number of new words.
ENCODED_ROWS_AT_LEAST = 16
ENCODED_CHUNK_ROWS = 64


class PortableCalls:
    """The calls of `language_model` (a `BidirectionalLanguageModel`) in `keras.ops`.

    Attributes:
        state_buffers: `{state key: keras.Variable (max_batch_size, size)}`.
        token_cache: the `TokenEncodingCache` of a character model's calls,
            or None (`token_cache_size` 0, or token inputs): then each call
            encodes every token of its batch.
    """

    def __init__(self, language_model, token_cache_size=0):
        self.language_model = lm = language_model
        self.state_buffers = {key: keras.Variable(np.zeros([lm.max_batch_size, size], np.float32), trainable=False,
                                                  name=f"state_{key}")
                              for key, _, size in lm.state_keys}
        self._run = inference_call(lm.network, then=self._in_elmo_form)
        self.token_cache = None
        if lm.use_character_inputs and token_cache_size > 0:
            self._set_up_token_cache(token_cache_size)

    def _set_up_token_cache(self, max_size):
        """The cached path: the token encoder and the LSTM stacks as two models on the network's layers
        (`build_token_encoder`, `build_contextual_bilm`), each compiled, with the encodings kept in between."""
        lm = self.language_model
        # Rows of characters alone are read as far as their words reach (`needed_columns`); a word embedding's
        # rows end in the word's id.
        trimmed = lm.options.word_embedding is None
        encoder = build_token_encoder(lm.network, lm.options, any_width=trimmed)
        run_encoder = inference_call(keras.Model({"token_characters": encoder.input}, encoder.output))
        self._run_contextual = inference_call(build_contextual_bilm(lm.network, lm.options), then=self._in_elmo_form)
        padded_length = backend_module("inference").padded_length

        def encode_rows(ids):  # (n, width) char ids, a chunk's on JAX -> (n, projection_dim) float32 NumPy
            rows = _padded_rows(ids, ENCODED_ROWS_AT_LEAST if len(ids) <= ENCODED_ROWS_AT_LEAST else ENCODED_CHUNK_ROWS)
            return keras.ops.convert_to_numpy(run_encoder({"token_characters": rows[np.newaxis]}))[0, :len(ids)]

        def encode(ids):  # (n >= 1, width) char ids -> (n, projection_dim) float32 NumPy
            if trimmed:
                ids = ids[:, :min(padded_length(needed_columns(ids, widest_filter(lm.options))), ids.shape[1])]
            if padded_length(1) == 1:  # a backend that compiles nothing per shape encodes them at once
                return encode_rows(ids)
            return np.concatenate([encode_rows(ids[start:start + ENCODED_CHUNK_ROWS])
                                   for start in range(0, len(ids), ENCODED_CHUNK_ROWS)])

        self.token_cache = TokenEncodingCache(encode, lm.options.projection_dim, max_size)

    def check_ids(self, ids):
        """`ids` (integers, any array) as int32 NumPy, their values checked (`bilm.models.id_checks`)."""
        ids = np.asarray(keras.ops.convert_to_numpy(ids), np.int32)
        check_id_values(ids, self.language_model.options, *self.language_model.id_limits())
        return ids

    def __call__(self, ids, stateful, start):
        """The ELMo outputs (`elmo_outputs`) of checked `ids`: from and into the state buffers when `stateful`,
        else from the start states of `start` (None: the model's)."""
        lm = self.language_model
        batch, time = ids.shape[:2]
        if not stateful:  # (a stateful call's rows are its state buffers' rows)
            ids = padded_batch(ids)
        if self.token_cache is None:
            inputs, run = {lm.input_key: padded_ids(ids)}, self._run
        else:
            distinct, index = self.token_cache.distinct_encodings(ids)
            index = padded_ids(index)
            inputs = {"distinct_encodings": _padded_rows(distinct, exactly=distinct_rows(len(distinct), index.size))[
                np.newaxis],
                      "token_index": index, "mask": padded_ids(np.any(ids != 0, axis=-1))}
            run = self._run_contextual
        starts = None if stateful else lm.start_states(start)
        for key, _, size in lm.state_keys:
            if stateful:
                inputs[key] = self.state_buffers[key].value[:batch]
            else:
                inputs[key] = np.broadcast_to(starts[key], (len(ids), size))
        outputs, final_states = run(inputs)
        if stateful:
            for key, output_key, _ in lm.state_keys:
                buffer = self.state_buffers[key]
                buffer.assign(ops.slice_update(buffer.value, (0, 0), final_states[output_key]))
        return unpadded_elmo_outputs(outputs, batch, time)

    def _in_elmo_form(self, outputs):
        """`(elmo_outputs of the network's outputs, {final state output key: state})`: part of the compiled call,
        at the call's padded shape (the real rows' values at the real positions are those of the real shape)."""
        states = {output_key: outputs[output_key] for _, output_key, _ in self.language_model.state_keys}
        return elmo_outputs(outputs, self.language_model.options.n_layers), states


def distinct_rows(n, positions):
    """The rows a call's `n` distinct encodings are padded to where the backend compiles a program per shape: the
    least of a quarter, a half and all of its `positions` (the padded token index's size) that holds them, so that
    a call's shape allows at most three programs while the first LSTM layer's input products run on about as many
    rows as there are distinct tokens, not one per position (docs/performance.md). A call of at most
    `DISTINCT_ROWS_WHOLE_UP_TO` positions (one sentence, or a few short ones) takes all of them: its one program
    a shape, as the rows a fraction would spare cost less than a program's compilation."""
    if positions <= DISTINCT_ROWS_WHOLE_UP_TO:
        return positions
    for fraction in DISTINCT_ROW_FRACTIONS:
        if n <= -(-positions // fraction):
            return -(-positions // fraction)
    return positions


# `distinct_rows`' fractions of a call's positions, smallest first: 1/4, 1/2, all.
DISTINCT_ROW_FRACTIONS = (4, 2, 1)
# Calls of at most this many positions pad their distinct rows to all of them (`distinct_rows`).
DISTINCT_ROWS_WHOLE_UP_TO = 64


def _padded_rows(rows, exactly):
    """`rows` (`(n, ...)`) with zero rows appended up to `exactly` rows where its backend compiles a program per
    shape (JAX: a count the call's other inputs fix, or a chunk's, so that the rows add no shape of their own);
    the same `rows` elsewhere (`padded_length`)."""
    padded_length = backend_module("inference").padded_length
    if padded_length(1) == 1:  # a backend that compiles nothing per shape pads nothing
        return rows
    return np.pad(rows, [(0, exactly - len(rows))] + [(0, 0)] * (rows.ndim - 1))
