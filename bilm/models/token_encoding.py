"""The biLM's token encoder: each token's ids to its encoding (width P), the first layer the LSTMs read.

A character model's encoder is the char CNN, the highway layers, the word
embedding of an ELMoForManyLangs model and the projection to P
(`encode_characters`); a token model's is a table. `encode_streams` runs it
over the network's input streams, once per distinct token where asked, and
`build_token_encoder` makes a built biLM's encoder a model of its own (same
layers, so same weights), for the token caches and the softmax's start.
"""
import functools

import keras

from bilm.errors import UserError
from bilm.layers.char_cnn import CharCNNEncoder
from bilm.layers.highway import Highway
from bilm.layers.initializers import dense_initializer, host_values, uniform
from bilm.layers.token_projection import TokenProjection
from bilm.layers.unique_tokens import GatherTokens, UniqueTokens
from bilm.models.network_dtype import FLOAT32


def token_encoder_layers(options, n_token_vocab, padded, kernels):
    """`(input name, input shape, encode)`: the token encoder's layers, `encode` mapping ids to encodings
    (`kernels`: the highway's arguments of `build_bilm`; its `kernel_initializer`, where not None, starts
    every table and kernel of the encoder).

    With `char_cnn`: the char CNN, highway, optional word embedding and
    projection to P; else a token embedding table of `n_token_vocab` rows.
    """
    given = kernels["kernel_initializer"]
    if options.char_cnn is None:
        if n_token_vocab is None:
            raise UserError("Token inputs (options without 'char_cnn') need n_token_vocab.")
        token_embedding = keras.layers.Embedding(
            n_token_vocab, options.projection_dim,
            embeddings_initializer=host_values(given or uniform(1.0)),
            name="token_embedding", dtype=FLOAT32)
        return "token_ids", (None,), token_embedding
    cnn = options.char_cnn
    char_encoder = CharCNNEncoder(cnn.n_characters, cnn.embedding_dim, cnn.filters, cnn.activation,
                                  kernel_initializer=given, name="char_cnn", dtype=FLOAT32)
    highway = Highway(cnn.n_highway, name="highway", dtype=FLOAT32, **kernels)
    word_embedding = _word_embedding(options, padded, given)
    projection = None
    if token_features(options) != options.projection_dim:
        projection = TokenProjection(
            options.projection_dim, kernel_initializer=host_values(given or dense_initializer(token_features(options))),
            bias_initializer=host_values("zeros"), name="token_projection", dtype=FLOAT32)
    encode = functools.partial(encode_characters, char_encoder=char_encoder, highway=highway,
                               projection=projection, word_embedding=word_embedding)
    return "token_characters", (None, options.token_id_width), encode


def encode_streams(streams, encode, deduplicate, directions, mask=None):
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


def _word_embedding(options, padded, initializer=None):
    """The word table of a model with a word embedding (`padded`: a zero row 0 for the shifted ids), or None;
    started by `initializer` (None: the original's)."""
    if options.word_embedding is None:
        return None
    return keras.layers.Embedding(
        options.word_embedding.dictionary.n_ids + padded, options.word_embedding.dim,
        embeddings_initializer=host_values(initializer or uniform(0.25)), name="word_embedding",
        dtype=FLOAT32)


def encode_characters(token_ids, char_encoder, highway, projection, word_embedding=None):
    """`(batch, time, token_id_width)` ids -> `(batch, time, projection_dim)`: the char CNN and highway
    layers over the character ids, after the word's vector when the last id is a word's."""
    if word_embedding is None:
        x = highway(char_encoder(token_ids))
    else:
        x = keras.ops.concatenate(
            [word_embedding(token_ids[..., -1]), highway(char_encoder(token_ids[..., :-1]))], axis=-1)
    return projection(x) if projection is not None else x


def build_token_encoder(bilm, options, name="token_encoder", any_width=False):
    """The char-CNN token encoder of a character `build_bilm` model, as its
    own model on the same layers (so the same weights).

    Input: int `(1, n_tokens, token_id_width)` ids; with `any_width`, of
    any width (the first columns of such rows, `needed_columns`: options
    without a word embedding only). Output: `(1, n_tokens,
    projection_dim)`, what the biLM computes for each of those tokens.
    """
    if any_width and options.word_embedding is not None:
        raise ValueError("A model with a word embedding reads its rows' last column: they keep their width.")
    width = None if any_width else options.token_id_width
    char_ids = keras.Input(shape=(None, width), dtype="int32", name="token_characters")
    layers = {layer.name: layer for layer in bilm.layers}
    projection = layers.get("token_projection")
    word_embedding = bilm.get_layer("word_embedding") if options.word_embedding is not None else None
    encoded = encode_characters(char_ids, bilm.get_layer("char_cnn"), bilm.get_layer("highway"), projection,
                                 word_embedding)
    return keras.Model(inputs=char_ids, outputs=encoded, name=name)


def widest_filter(options):
    """The widest filter of a character model's char CNN."""
    return max(width for width, _ in options.char_cnn.filters)
