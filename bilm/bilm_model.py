"""The character (or token) biLM as a Keras functional model.

Shared by inference (`BidirectionalLanguageModel`) and training: it knows
nothing about state buffers, batching or losses. LSTM states go in and
come out as ordinary inputs and outputs so that callers decide whether to
carry them.
"""
import keras
import tensorflow as tf

from bilm.char_cnn import CharCNNEncoder
from bilm.highway import Highway
from bilm.initializers import dense_initializer
from bilm.lstm import ProjectedLSTM

DIRECTIONS = ("forward", "backward")


def state_keys(options, bidirectional=True):
    """`[(input_key, output_key, size), ...]` for every LSTM state tensor.

    Input keys are `"{direction}_{layer}_{c|h}"`; the model's output keys
    for the final states add a `final_` prefix.
    """
    keys = []
    output_dim = options.projection_dim
    for direction in DIRECTIONS[: 2 if bidirectional else 1]:
        for layer in range(options.n_layers):
            for part, size in (("c", options.lstm_dim), ("h", output_dim)):
                key = f"{direction}_{layer}_{part}"
                keys.append((key, f"final_{key}", size))
    return keys


@keras.saving.register_keras_serializable(package="bilm")
class SequenceMask(keras.layers.Layer):
    """Which tokens are real: `(batch, time, [chars])` ids -> `(batch, time)` bool.

    With `padded=True` (prediction ids, shifted so that 0 is padding) a token
    is real when any of its ids is nonzero. With `padded=False` (training
    windows, always full, where 0 is a real id) every token is real.
    """

    def __init__(self, padded=True, **kwargs):
        super().__init__(**kwargs)
        self.padded = padded

    def call(self, ids):
        if not self.padded:
            return tf.ones(tf.shape(ids)[:2], tf.bool)
        if ids.shape.rank == 3:
            return tf.reduce_any(tf.not_equal(ids, 0), axis=-1)
        return tf.not_equal(ids, 0)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:2])

    def get_config(self):
        config = super().get_config()
        config.update({"padded": self.padded})
        return config


@keras.saving.register_keras_serializable(package="bilm")
class UniqueTokens(keras.layers.Layer):
    """The distinct tokens of a batch, so the token encoder runs once per token.

    Natural text repeats tokens a lot; encoding each distinct char-id row once
    and gathering the results back gives the same values for much less work.

    Call arguments:
        char_ids: int `(batch, time, max_chars)`.

    Returns:
        `(unique_ids, index)`: int `(1, n_unique, max_chars)` and int
        `(batch, time)` with `char_ids[b, t] == unique_ids[0, index[b, t]]`.
    """

    def call(self, char_ids):
        shape = tf.shape(char_ids)
        unique, index = tf.raw_ops.UniqueV2(x=tf.reshape(char_ids, [-1, shape[2]]), axis=[0])
        return unique[tf.newaxis], tf.reshape(index, shape[:2])

    def compute_output_shape(self, input_shape):
        return (1, None, input_shape[2]), tuple(input_shape[:2])


@keras.saving.register_keras_serializable(package="bilm")
class GatherTokens(keras.layers.Layer):
    """Inverse of `UniqueTokens`: `(1, n_unique, dim)` features -> `(batch, time, dim)`."""

    def call(self, unique_features, index):
        return tf.gather(unique_features[0], index)

    def compute_output_shape(self, unique_features_shape, index_shape):
        return (*index_shape, unique_features_shape[-1])


def build_bilm(options, n_token_vocab=None, bidirectional=True, dropout=0.0,
               padded=True, deduplicate_tokens=True, name="bilm"):
    """Builds the biLM as a functional `keras.Model`.

    Args:
        options: `BiLMOptions`. With `char_cnn`, inputs are character ids
            and the table has `options.char_cnn.n_characters` rows.
        n_token_vocab: rows of the token embedding table (token inputs only).
        bidirectional: build the backward stack too.
        dropout: rate applied to each LSTM layer's input (training only).
        padded: ids are prediction ids where 0 is batch padding (rows have
            their own lengths); `False` for training windows, always full.
        deduplicate_tokens: run the token encoder (char CNN, highway,
            projection) once per distinct token of the batch.

    Inputs (a dict):
        `"token_characters"`: int `(batch, time, max_chars)`, or
        `"token_ids"`: int `(batch, time)`; and one initial state per key of
        `state_keys(options)`, `(batch, lstm_dim)` for `c`,
        `(batch, projection_dim)` for `h`.

    Outputs (a dict):
        `"token_embeddings"` `(batch, time, projection_dim)` (zeros at
        padding), `"mask"` `(batch, time)` bool, `"lengths"` `(batch,)`,
        `"forward_{l}"` / `"backward_{l}"` `(batch, time, projection_dim)`
        for each layer (zeros beyond each row's length, residual included),
        and `"final_{direction}_{l}_{c|h}"` for every state.
    """
    # === Layers ===
    projection_dim = options.projection_dim
    if options.char_cnn is not None:
        cnn = options.char_cnn
        token_input = keras.Input(
            shape=(None, cnn.max_characters_per_token), dtype="int32", name="token_characters")
        char_encoder = CharCNNEncoder(
            cnn.n_characters, cnn.embedding_dim, cnn.filters, cnn.activation, name="char_cnn")
        highway = Highway(cnn.n_highway, name="highway")
        projection = None
        if cnn.n_filters != projection_dim:
            projection = keras.layers.Dense(
                projection_dim, kernel_initializer=dense_initializer(cnn.n_filters),
                name="token_projection")
    else:
        if n_token_vocab is None:
            raise ValueError("Token inputs (options without 'char_cnn') need n_token_vocab.")
        token_input = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        token_embedding = keras.layers.Embedding(
            n_token_vocab, projection_dim,
            embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            name="token_embedding")
    sequence_mask = SequenceMask(padded=padded, name="sequence_mask")
    directions = DIRECTIONS[: 2 if bidirectional else 1]
    lstms = {
        (direction, layer): ProjectedLSTM(
            options.lstm_dim, projection_dim, options.cell_clip, options.proj_clip,
            go_backwards=direction == "backward", name=f"{direction}_lstm_{layer}")
        for direction in directions for layer in range(options.n_layers)
    }
    dropouts = {
        key: keras.layers.Dropout(dropout, name=f"{key[0]}_dropout_{key[1]}")
        for key in lstms
    } if dropout > 0 else {}
    state_inputs = {
        key: keras.Input(shape=(size,), name=key) for key, _, size in state_keys(options, bidirectional)
    }

    # === Functional Model ===
    mask = sequence_mask(token_input)
    lengths = keras.ops.sum(keras.ops.cast(mask, "int32"), axis=1)
    if options.char_cnn is not None:
        token_chars = token_input
        if deduplicate_tokens:
            token_chars, token_index = UniqueTokens(name="unique_tokens")(token_input)
        x = highway(char_encoder(token_chars))
        if projection is not None:
            x = projection(x)
        if deduplicate_tokens:
            x = GatherTokens(name="gather_tokens")(x, token_index)
    else:
        x = token_embedding(token_input)
    if padded:
        x = x * keras.ops.expand_dims(keras.ops.cast(mask, x.dtype), -1)
    outputs = {"token_embeddings": x, "mask": mask, "lengths": lengths}
    for direction in directions:
        layer_input = x
        for layer in range(options.n_layers):
            key = (direction, layer)
            if key in dropouts:
                layer_input = dropouts[key](layer_input)
            state_name = f"{direction}_{layer}"
            h, final_c, final_h = lstms[key](
                layer_input, lengths,
                [state_inputs[f"{state_name}_c"], state_inputs[f"{state_name}_h"]])
            if options.use_skip_connections and layer > 0:
                h = h + layer_input
            outputs[f"{direction}_{layer}"] = h
            outputs[f"final_{state_name}_c"] = final_c
            outputs[f"final_{state_name}_h"] = final_h
            layer_input = h
    inputs = {token_input.name: token_input, **state_inputs}
    return keras.Model(inputs=inputs, outputs=outputs, name=name)
