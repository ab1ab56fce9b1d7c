"""A `BidirectionalLanguageModel`'s calls on TensorFlow: `tf.function`s over any batch shape, and the token
cache's path (each distinct token encoded once and kept for later calls), run instead of the portable calls
(`bilm.models.portable_calls`), which they are tested against."""
import contextlib
import types

import numpy as np
import tensorflow as tf

from bilm.layers.char_cnn import DIRECT_CONVOLUTION_TOKENS
from bilm.models.elmo_outputs import elmo_outputs
from bilm.models.functional_bilm import build_contextual_bilm
from bilm.models.id_checks import check_id_values, refuse_batch
from bilm.models.token_cache import TokenEncodingCache
from bilm.models.token_encoding import build_token_encoder
from bilm.ops.char_convolutions import direct_convolutions
from bilm.text.batching import check_id_shape


class TensorFlowCalls(tf.Module):
    """The calls of `language_model` (a `BidirectionalLanguageModel`) on TensorFlow; a `tf.Module`, so the
    model's `variables` are its state buffers.

    Attributes:
        state_buffers: `{state key: tf.Variable (max_batch_size, size)}`.
        token_cache: the `TokenEncodingCache` of character inputs given as
            NumPy arrays or eager tensors, or None (`token_cache_size` 0, or
            token inputs).
    """

    def __init__(self, language_model, token_cache_size):
        super().__init__(name="language_model_calls")
        lm = language_model
        # Not tracked: the model tracks this module, not the other way round.
        self._language_model = types.SimpleNamespace(model=lm)
        self.state_buffers = {
            key: tf.Variable(tf.zeros([lm.max_batch_size, size]), trainable=False, name=f"state_{key}")
            for key, _, size in lm.state_keys
        }
        if lm.use_character_inputs:
            spec = tf.TensorSpec([None, None, lm.options.token_id_width], tf.int32)
        else:
            spec = tf.TensorSpec([None, None], tf.int32)
        # Each call takes the start states as an argument, so a call may ask
        # for another start than the model's without retracing.
        start_spec = {key: tf.TensorSpec([size], tf.float32) for key, _, size in lm.state_keys}
        self._calls = {
            stateful: tf.function(
                lambda ids, starts, stateful=stateful: self._forward(lm.network, {lm.input_key: ids}, stateful, starts),
                input_signature=[spec, start_spec], autograph=False)
            for stateful in (True, False)
        }
        self.token_cache = None
        if lm.use_character_inputs and token_cache_size > 0:
            self._set_up_token_cache(token_cache_size)

    @property
    def language_model(self):
        return self._language_model.model

    def _set_up_token_cache(self, max_size):
        """The cached path: a token encoder and the LSTM stacks as two models
        on the network's layers, with the encodings kept in between."""
        lm = self.language_model
        options = lm.options
        token_encoder = build_token_encoder(lm.network, options)
        self._contextual_model = build_contextual_bilm(lm.network, options)
        token_encoder.trainable = self._contextual_model.trainable = False

        def encoder(direct):
            def encode(ids):
                with direct_convolutions() if direct else contextlib.nullcontext():
                    return token_encoder(ids[tf.newaxis], training=False)[0]
            return tf.function(encode, input_signature=[tf.TensorSpec([None, options.token_id_width], tf.int32)],
                               autograph=False)

        # A call's new words are usually few: their encoder never traces the
        # char CNN's compiled loop, which only many tokens at once need.
        encode_few, encode_many = encoder(direct=True), encoder(direct=False)
        self.token_cache = TokenEncodingCache(
            lambda ids: (encode_few if len(ids) <= DIRECT_CONVOLUTION_TOKENS else encode_many)(ids).numpy(),
            options.projection_dim, max_size)

        def encodings_spec(rows):
            return [tf.TensorSpec([None, options.projection_dim], tf.float32),
                    tf.TensorSpec([rows, None], tf.int32), tf.TensorSpec([rows, None], tf.bool),
                    {key: tf.TensorSpec([size], tf.float32) for key, _, size in lm.state_keys}]

        def cached_calls(rows):
            return {stateful: tf.function(
                lambda distinct, index, mask, starts, stateful=stateful: self._forward(
                    self._contextual_model,
                    {"token_index": index, "mask": mask, "distinct_encodings": distinct[tf.newaxis]},
                    stateful, starts),
                input_signature=encodings_spec(rows), autograph=False) for stateful in (True, False)}

        self._cached_calls = cached_calls(None)
        # One sentence a call (a service, a notebook) gets a trace of its
        # own, whose LSTMs know their one row and trace only the recurrence
        # that row runs.
        self._one_row_cached_calls = cached_calls(1)

    def check_ids(self, ids):
        """`ids` (integers, any array or tensor) as an int32 tensor, checked eagerly so bad input is a clear
        error, not a shape trace; inside a trace, what its static shape tells."""
        lm = self.language_model
        ids = tf.convert_to_tensor(ids)
        if ids.dtype != tf.int32:
            ids = tf.cast(ids, tf.int32)
        if tf.executing_eagerly():  # NumPy: a few eager ops would cost more than the check
            check_id_values(ids.numpy(), lm.options, *lm.id_limits())
        else:
            width, _, max_rows = lm.id_limits()
            check_id_shape(ids.shape, width)
            if max_rows is not None and ids.shape[0] is not None and ids.shape[0] > max_rows:
                refuse_batch(ids.shape[0], max_rows)
        return ids

    def __call__(self, ids, stateful, start):
        """The ELMo outputs (`elmo_outputs`) of checked `ids`: from and into the state buffers when `stateful`,
        else from the start states of `start` (None: the model's); eager NumPy-like ids take the token cache."""
        lm = self.language_model
        if self.token_cache is not None and tf.executing_eagerly():
            ids = ids.numpy()
            distinct, index = self.token_cache.distinct_encodings(ids)
            calls = self._one_row_cached_calls if len(ids) == 1 else self._cached_calls
            return calls[stateful](distinct, index, np.any(ids != 0, axis=-1), lm.start_tensors(start))
        return self._calls[stateful](ids, lm.start_states(start))

    def _forward(self, model, inputs, stateful, starts):
        lm = self.language_model
        batch = tf.shape(inputs["mask" if "mask" in inputs else lm.input_key])[0]
        for key, _, size in lm.state_keys:
            if stateful:
                inputs[key] = self.state_buffers[key][:batch]
            else:
                inputs[key] = tf.broadcast_to(starts[key], [batch, size])
        outputs = model(inputs, training=False)
        if stateful:
            for key, output_key, _ in lm.state_keys:
                self.state_buffers[key][:batch].assign(outputs[output_key])
        return elmo_outputs(outputs, lm.options.n_layers)
