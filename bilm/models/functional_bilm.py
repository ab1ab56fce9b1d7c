"""The character (or token) biLM as a Keras functional model.

Shared by inference (`BidirectionalLanguageModel`) and training: it knows
nothing about state buffers, batching or losses. LSTM states go in and
come out as ordinary inputs and outputs so that callers decide whether to
carry them.
"""
import keras

from bilm.backend import backend_module
from bilm.errors import UserError
from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.layers.sequence_mask import SequenceMask
from bilm.layers.stateless_dropout import StatelessDropout, dropout_site
from bilm.layers.unique_tokens import GatherTokens

# FLOAT32, float32_policy, build_token_encoder and token_features are also this module's names, as they were.
from bilm.models.network_dtype import FLOAT32 as FLOAT32
from bilm.models.network_dtype import float32_policy as float32_policy
from bilm.models.token_encoding import build_token_encoder as build_token_encoder
from bilm.models.token_encoding import encode_streams, token_encoder_layers
from bilm.models.token_encoding import token_features as token_features
from bilm.utils.thread_flag import ThreadFlag

DIRECTIONS = ("forward", "backward")
LAYOUTS = ("prediction", "training")
# On (`with WEIGHTS_FOLLOW.on():`, this thread) while a caller builds a biLM
# whose weights a file then sets: `build_bilm`'s default initializer is then
# zeros, skipping the random draws (most of the original size's build).
WEIGHTS_FOLLOW = ThreadFlag()


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
        kernel_initializer: None (the original's; zeros inside `WEIGHTS_FOLLOW.on()`), or a
            Keras initializer for every table and kernel (`"zeros"` when weights follow: none drawn).

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
    input_name, input_shape, encode = token_encoder_layers(options, n_token_vocab, padded, kernels)
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
    encoded_by_direction, distinct_by_direction = encode_streams(
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
