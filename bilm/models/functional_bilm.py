"""The character (or token) biLM as a Keras functional model.

Shared by inference (`BidirectionalLanguageModel`) and training: it knows
nothing about state buffers, batching or losses. LSTM states go in and
come out as ordinary inputs and outputs so that callers decide whether to
carry them.
"""
import functools

import keras

from bilm.backend import backend_module
from bilm.errors import UserError
from bilm.layers.char_cnn import CharCNNEncoder
from bilm.layers.highway import Highway
from bilm.layers.initializers import dense_initializer
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.layers.sequence_mask import SequenceMask
from bilm.layers.stateless_dropout import StatelessDropout, dropout_site
from bilm.layers.token_projection import TokenProjection
from bilm.layers.unique_tokens import GatherTokens, UniqueTokens
from bilm.utils.thread_flag import ThreadFlag

DIRECTIONS = ("forward", "backward")
LAYOUTS = ("prediction", "training")
# On (`with WEIGHTS_FOLLOW.on():`, this thread) while a caller builds a biLM
# whose weights a file then sets: `build_bilm`'s default initializer is then
# zeros, skipping the random draws (most of the original size's build).
WEIGHTS_FOLLOW = ThreadFlag()
# Every layer of the biLM computes in float32 whatever the global Keras
# dtype policy (a mixed-precision one included): its numerics are the
# original's; bfloat16 or int8 kernels are `kernel_dtype`'s.
FLOAT32 = "float32"


def float32_policy(dtype, who):
    """A layer's dtype policy around the biLM: float32, given (a name, a policy or its config) or not."""
    if dtype is None:
        return FLOAT32
    policy = keras.dtype_policies.get(dtype)
    if policy.compute_dtype != FLOAT32 or policy.variable_dtype != FLOAT32:
        raise UserError(f"{who} computes in float32 (the biLM's numerics). Received: dtype={policy.name!r}; "
                        "for bfloat16 kernels pass kernel_dtype='bfloat16' (the layers after it may use any "
                        "policy).")
    return policy


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


def build_bilm(options, n_token_vocab=None, bidirectional=True, dropout=0.0, layout="prediction",
               deduplicate_tokens=True, training_matmul_dtype="float32", kernel_dtype="float32",
               kernel_initializer=None, name="bilm"):
    """Builds the biLM as a functional `keras.Model`.

    Args:
        options: `BiLMOptions`. With `char_cnn`, inputs are character ids
            and the table has `options.char_cnn.n_characters` rows; with a
            `word_embedding` too, each token's row of ids ends with its word
            id, whose vectors precede the char CNN's features in the
            projection (its table has the dictionary's rows, plus a zero
            row 0 in the prediction layout).
        n_token_vocab: rows of the token embedding table (token inputs only).
        bidirectional: build the backward stack too.
        dropout: rate applied to each LSTM layer's input when the model is
            called with `training=True`; the model then takes a
            `"dropout_seed"` input, int64 `(2,)` (on JAX, its uint32 `(4,)`
            words: `bilm.backend.jax.random`), that fixes the masks.
        layout: how the ids come (`LAYOUTS`). `"prediction"`: batches
            of sentences, ids shifted so that 0 is padding and each row has
            its own length; both stacks read the same input, the backward
            one each row right to left within its length. `"training"`:
            full windows of the training streams (0 is a real id); the
            backward stack reads its own input, `"{ids}_reverse"` (the
            reversed-token stream), left to right, so its state carries
            across windows, and its outputs are in that stream's order.
        deduplicate_tokens: run the token encoder (char CNN, highway,
            projection) once per distinct token of the batch.
        training_matmul_dtype: `"float32"`, or `"bfloat16"` for bfloat16 operands in
            the highway's and the LSTMs' input-half matmuls when the model
            is called with `training=True` (see `bilm.ops.matmul_dtype`).
        kernel_dtype: `"float32"`, or `"bfloat16"` or `"int8"` for
            inference: the dtype the highway's and the LSTMs' kernels are
            kept in (see `ProjectedLSTM`, `bilm.ops.matmul_dtype`); such a
            model refuses `training=True`.
        kernel_initializer: None (the original's; zeros inside `WEIGHTS_FOLLOW.on()`),
            or a Keras initializer for those kernels (`"zeros"` when weights follow).

    Inputs (a dict):
        `"token_characters"`: int `(batch, time, options.token_id_width)`, or
        `"token_ids"`: int `(batch, time)`; the same with `_reverse` for a
        separate backward stream; one initial state per key of
        `state_keys(options)`, `(batch, lstm_dim)` for `c`,
        `(batch, projection_dim)` for `h`; `"dropout_seed"` when dropout > 0.

    Outputs (a dict):
        `"token_embeddings"` `(batch, time, projection_dim)` (zeros at
        padding), `"mask"` `(batch, time)` bool, `"lengths"` `(batch,)`,
        `"forward_{l}"` / `"backward_{l}"` `(batch, time, projection_dim)`
        for each layer (zeros beyond each row's length, residual included),
        and `"final_{direction}_{l}_{c|h}"` for every state.
    """
    if layout not in LAYOUTS:
        raise UserError(f"layout must be one of {LAYOUTS}. Received: layout={layout!r}")
    # === Layers ===
    directions = DIRECTIONS[: 2 if bidirectional else 1]
    padded = layout == "prediction"
    separate = layout == "training" and bidirectional
    kernels = {"training_matmul_dtype": training_matmul_dtype, "kernel_dtype": kernel_dtype,
               "kernel_initializer": kernel_initializer or ("zeros" if WEIGHTS_FOLLOW.is_on() else None)}
    input_name, input_shape, encode = _token_encoder(options, n_token_vocab, padded, kernels)
    token_inputs = {"forward": keras.Input(shape=input_shape, dtype="int32", name=input_name)}
    token_inputs["backward"] = (
        keras.Input(shape=input_shape, dtype="int32", name=f"{input_name}_reverse")
        if separate else token_inputs["forward"])
    sequence_mask = SequenceMask(padded=padded, name="sequence_mask", dtype=FLOAT32)
    lstms, dropouts, state_inputs, seed_input = _recurrent_layers(options, directions, separate, dropout, kernels)

    # === Functional Model ===
    streams = [token_inputs[d] for d in directions[: 2 if separate else 1]]
    mask = sequence_mask(token_inputs["forward"])
    lengths = keras.ops.sum(keras.ops.cast(mask, "int32"), axis=1)
    encoded_by_direction, distinct_by_direction = _encode_streams(
        streams, encode, deduplicate_tokens and options.char_cnn is not None, directions, mask if padded else None)
    outputs = {"token_embeddings": encoded_by_direction["forward"], "mask": mask, "lengths": lengths}
    outputs.update(_lstm_stacks(options, encoded_by_direction, lengths, lstms, state_inputs, dropouts, seed_input,
                                distinct_by_direction))
    inputs = {t.name: t for t in {id(t): t for t in token_inputs.values()}.values()}
    inputs.update(state_inputs, **({"dropout_seed": seed_input} if seed_input is not None else {}))
    return keras.Model(inputs=inputs, outputs=outputs, name=name)


def _recurrent_layers(options, directions, separate, dropout, kernels):
    """`(lstms, dropouts, state_inputs, seed_input)`: `{(direction, layer): layer}` of the LSTMs (with the
    `kernels` arguments of `build_bilm`: matmul dtype, kernel dtype and initializer) and of the
    dropouts on their inputs (none when `dropout` is 0), an `Input` per LSTM state, and the dropout seed's
    `Input` (None without dropout). Without `separate` backward inputs, the backward LSTMs read right to left."""
    lstms = {
        (direction, layer): ProjectedLSTM(
            options.lstm_dim, options.projection_dim, options.cell_clip, options.proj_clip,
            go_backwards=direction == "backward" and not separate, name=f"{direction}_lstm_{layer}", dtype=FLOAT32,
            **kernels)
        for direction in directions for layer in range(options.n_layers)
    }
    dropouts = {
        (direction, layer): StatelessDropout(
            dropout, dropout_site(d, layer, options.n_layers), name=f"{direction}_dropout_{layer}", dtype=FLOAT32)
        for d, direction in enumerate(directions) for layer in range(options.n_layers)
    } if dropout > 0 else {}
    state_inputs = {key: keras.Input(shape=(size,), name=key)
                    for key, _, size in state_keys(options, bidirectional=len(directions) == 2)}
    # The seed as the backend's random numbers take it (`bilm.backend.<name>.random`).
    random = backend_module("random")
    seed_input = keras.Input(batch_shape=random.SEED_SHAPE, dtype=random.SEED_DTYPE, name="dropout_seed") \
        if dropouts else None
    return lstms, dropouts, state_inputs, seed_input


def _token_encoder(options, n_token_vocab, padded, kernels):
    """`(input name, input shape, encode)`: the token encoder's layers, `encode` mapping ids to encodings
    (`kernels`: the highway's arguments of `build_bilm`).

    With `char_cnn`: the char CNN, highway, optional word embedding and
    projection to P; else a token embedding table of `n_token_vocab` rows.
    """
    if options.char_cnn is None:
        if n_token_vocab is None:
            raise UserError("Token inputs (options without 'char_cnn') need n_token_vocab.")
        token_embedding = keras.layers.Embedding(
            n_token_vocab, options.projection_dim,
            embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            name="token_embedding", dtype=FLOAT32)
        return "token_ids", (None,), token_embedding
    cnn = options.char_cnn
    char_encoder = CharCNNEncoder(cnn.n_characters, cnn.embedding_dim, cnn.filters, cnn.activation, name="char_cnn",
                                  dtype=FLOAT32)
    highway = Highway(cnn.n_highway, name="highway", dtype=FLOAT32, **kernels)
    word_embedding = _word_embedding(options, padded)
    projection = None
    if token_features(options) != options.projection_dim:
        projection = TokenProjection(
            options.projection_dim, kernel_initializer=dense_initializer(token_features(options)),
            name="token_projection", dtype=FLOAT32)
    encode = functools.partial(_encode_characters, char_encoder=char_encoder, highway=highway,
                               projection=projection, word_embedding=word_embedding)
    return "token_characters", (None, options.token_id_width), encode


def _encode_streams(streams, encode, deduplicate, directions, mask=None):
    """`(encoded_by_direction, distinct_by_direction)`: each direction's token encodings, `(batch, time, P)`
    (zeros where `mask`, if given, is false).

    With `deduplicate`, the encoder runs once per distinct token of all
    streams and `distinct_by_direction` maps each direction to `(distinct
    encodings, the index of each position)`, which the first LSTM layers
    take as they are; else it is None.
    """
    distinct_by_direction = None
    if deduplicate:
        unique, indices = UniqueTokens(name="unique_tokens", dtype=FLOAT32)(streams)
        gathers = [GatherTokens(name=f"gather_tokens_{i}", dtype=FLOAT32) for i in range(len(indices))]
        distinct = encode(unique)
        distinct_by_direction = {direction: (distinct, indices[min(d, len(indices) - 1)])
                                 for d, direction in enumerate(directions)}
        encoded = [gather(distinct, index) for gather, index in zip(gathers, indices)]
    else:
        encoded = [encode(stream) for stream in streams]
    if mask is not None:
        mask_3d = keras.ops.expand_dims(keras.ops.cast(mask, encoded[0].dtype), -1)
        encoded = [x * mask_3d for x in encoded]
    return {direction: encoded[min(d, len(encoded) - 1)] for d, direction in enumerate(directions)}, \
        distinct_by_direction


def token_features(options):
    """Width of a character model's token features before the projection: the
    char CNN's filters, plus the word embedding's dim when it has one."""
    return options.char_cnn.n_filters + (options.word_embedding.dim if options.word_embedding is not None else 0)


def _word_embedding(options, padded):
    """The word table of a model with a word embedding (`padded`: a zero row 0 for the shifted ids), or None."""
    if options.word_embedding is None:
        return None
    return keras.layers.Embedding(
        options.word_embedding.dictionary.n_ids + padded, options.word_embedding.dim,
        embeddings_initializer=keras.initializers.RandomUniform(-0.25, 0.25), name="word_embedding",
        dtype=FLOAT32)


def _encode_characters(token_ids, char_encoder, highway, projection, word_embedding=None):
    """`(batch, time, token_id_width)` ids -> `(batch, time, projection_dim)`: the char CNN and highway
    layers over the character ids, after the word's vector when the last id is a word's."""
    if word_embedding is None:
        x = highway(char_encoder(token_ids))
    else:
        x = keras.ops.concatenate(
            [word_embedding(token_ids[..., -1]), highway(char_encoder(token_ids[..., :-1]))], axis=-1)
    return projection(x) if projection is not None else x


def _lstm_stacks(options, encoded_by_direction, lengths, lstms, state_inputs, dropouts=None, seed_input=None,
                 distinct_by_direction=None):
    """Wires each direction's LSTM layers (dropout, skip connections) over
    `encoded_by_direction[direction]`; returns the `"{direction}_{l}"` and
    `"final_..."` outputs. With `distinct_by_direction[direction] = (distinct
    rows (1, n, P), index (batch, time))` for the same inputs, an undropped
    first layer reads those (see `ProjectedLSTM`'s `token_index`)."""
    outputs = {}
    dropouts = dropouts or {}
    for direction, layer_input in encoded_by_direction.items():
        for layer in range(options.n_layers):
            key = (direction, layer)
            state_name = f"{direction}_{layer}"
            states = [state_inputs[f"{state_name}_c"], state_inputs[f"{state_name}_h"]]
            if key in dropouts:
                layer_input = dropouts[key](layer_input, seed_input)
            if layer == 0 and distinct_by_direction and key not in dropouts:
                rows, index = distinct_by_direction[direction]
                h, final_c, final_h = lstms[key](rows, lengths, states, token_index=index)
            else:
                h, final_c, final_h = lstms[key](layer_input, lengths, states)
            if options.use_skip_connections and layer > 0:
                h = h + layer_input
            outputs[f"{direction}_{layer}"] = h
            outputs[f"final_{state_name}_c"] = final_c
            outputs[f"final_{state_name}_h"] = final_h
            layer_input = h
    return outputs


def build_token_encoder(bilm, options, name="token_encoder"):
    """The char-CNN token encoder of a character `build_bilm` model, as its
    own model on the same layers (so the same weights).

    Input: int `(1, n_tokens, token_id_width)` ids. Output: `(1, n_tokens,
    projection_dim)`, what the biLM computes for each of those tokens.
    """
    char_ids = keras.Input(shape=(None, options.token_id_width), dtype="int32", name="token_characters")
    projection = bilm.get_layer("token_projection") if _has_layer(bilm, "token_projection") else None
    word_embedding = bilm.get_layer("word_embedding") if options.word_embedding is not None else None
    encoded = _encode_characters(char_ids, bilm.get_layer("char_cnn"), bilm.get_layer("highway"), projection,
                                 word_embedding)
    return keras.Model(inputs=char_ids, outputs=encoded, name=name)


def build_contextual_bilm(bilm, options, name="contextual_bilm"):
    """The LSTM stacks of a `build_bilm` model of the prediction layout (one
    input stream), as their own model on the same layers, reading token
    encodings computed elsewhere (e.g. cached by `TokenEncodingCache`).

    Inputs (a dict): `"distinct_encodings"` float `(1, n_distinct,
    projection_dim)`, `"token_index"` int `(batch, time)` (which distinct
    encoding each position holds), `"mask"` bool `(batch, time)` (True at
    real tokens), and the initial states of `state_keys(options)`.

    Outputs: those of `build_bilm`, with the gathered encodings (zeroed at
    padding) as `"token_embeddings"`.
    """
    directions = [d for d in DIRECTIONS if _has_layer(bilm, f"{d}_lstm_0")]
    distinct = keras.Input(shape=(None, options.projection_dim), name="distinct_encodings")
    token_index = keras.Input(shape=(None,), dtype="int32", name="token_index")
    mask = keras.Input(shape=(None,), dtype="bool", name="mask")
    state_inputs = {
        key: keras.Input(shape=(size,), name=key)
        for key, _, size in state_keys(options, bidirectional=len(directions) == 2)
    }
    lengths = keras.ops.sum(keras.ops.cast(mask, "int32"), axis=1)
    x = GatherTokens(name="gather_tokens", dtype=FLOAT32)(distinct, token_index)
    x = x * keras.ops.expand_dims(keras.ops.cast(mask, x.dtype), -1)
    lstms = {(d, layer): bilm.get_layer(f"{d}_lstm_{layer}")
             for d in directions for layer in range(options.n_layers)}
    outputs = {"token_embeddings": x, "mask": mask, "lengths": lengths}
    outputs.update(_lstm_stacks(options, {d: x for d in directions}, lengths, lstms, state_inputs,
                                distinct_by_direction={d: (distinct, token_index) for d in directions}))
    inputs = {"distinct_encodings": distinct, "token_index": token_index, "mask": mask, **state_inputs}
    return keras.Model(inputs=inputs, outputs=outputs, name=name)


def _has_layer(model, name):
    return any(layer.name == name for layer in model.layers)
