"""What `ELMoEmbedding` accepts: text or ids, validated and turned into the biLM's ids, and their mask."""
import keras
import tensorflow as tf

from bilm.errors import UserError
from bilm.text.batching import check_id_shape
from bilm.text.graph_batching import batch_char_ids, batch_token_ids, sentences_to_tokens, token_lengths

INPUT_TYPES = ("auto", "tokens", "sentences", "char_ids", "token_ids")


def resolve_input_type(input_type, inputs, use_character_inputs):
    """`input_type` with `"auto"` decided from the dtype and rank of `inputs`."""
    if input_type != "auto":
        return input_type
    if keras.backend.standardize_dtype(inputs.dtype) == "string":
        return "sentences" if len(inputs.shape) == 1 else "tokens"
    return "char_ids" if use_character_inputs else "token_ids"


def output_time_shape(input_type, input_shape):
    """`(batch, time)` of the outputs for inputs of `input_shape` (None where unknown)."""
    shape = tuple(input_shape)
    if input_type == "sentences":
        return (shape[0], None)
    if input_type == "tokens":
        return shape[:2]
    time = shape[1]
    return (shape[0], None if time is None else time - 2)


def inputs_to_ids(inputs, requested_type, options, use_character_inputs, vocab_table=None, sequence_len=None,
                  who="ELMoEmbedding"):
    """The biLM's ids for any input `ELMoEmbedding` accepts, validated.

    Args:
        inputs: string tokens `(batch, time)`, string sentences `(batch,)`,
            char ids `(batch, time + 2, C)` or token ids `(batch, time + 2)`.
        requested_type: one of `INPUT_TYPES` (`"auto"` decides from the
            dtype and rank).
        options: prediction `BiLMOptions`.
        use_character_inputs: a character biLM (else token ids).
        vocab_table: `TokenVocabTable` of a token-input biLM given text.
        sequence_len: optional int `(batch,)` tokens per row, for string
            tokens only: every token inside the length is real, even `''`.
        who: what error messages start with.

    Returns:
        int32 `(batch, time + 2, C)` char ids or `(batch, time + 2)` token
        ids, as `Batcher` / `TokenBatcher` give them.
    """
    if not isinstance(inputs, tf.Tensor):
        inputs = tf.convert_to_tensor(inputs)
    input_type = resolve_input_type(requested_type, inputs, use_character_inputs)
    is_string = inputs.dtype == tf.string
    if input_type in ("tokens", "sentences"):
        if not is_string:
            raise TypeError(
                f"{who}: input_type={input_type!r} needs a string tensor (padding ''). "
                f"Received dtype {inputs.dtype.name}, shape {tuple(inputs.shape)}; integer ids need "
                "input_type='char_ids' (from Batcher) or 'token_ids' (from TokenBatcher).")
        if not use_character_inputs and vocab_table is None:
            raise UserError(
                f"{who}: a token-input biLM given text needs vocab_file= (the biLM's vocabulary).")
        if input_type == "sentences":
            if sequence_len is not None:
                raise UserError(f"{who}: sequence_len is only for input_type='tokens'.")
            tokens = sentences_to_tokens(inputs)
        else:
            tokens = inputs
        if use_character_inputs:
            return batch_char_ids(tokens, options.char_cnn.max_characters_per_token, sequence_len)
        return batch_token_ids(tokens, vocab_table, sequence_len)
    if sequence_len is not None:
        raise UserError(f"{who}: sequence_len is only for string tokens; ids carry their lengths.")
    if is_string or not inputs.dtype.is_integer:
        raise TypeError(
            f"{who} takes string tokens (batch, time), string sentences (batch,) or integer "
            f"{input_type} from {'Batcher' if input_type == 'char_ids' else 'TokenBatcher'} "
            f"(input_type={requested_type!r}). Received dtype {inputs.dtype.name}, "
            f"shape {tuple(inputs.shape)}.")
    if (input_type == "char_ids") != use_character_inputs:
        reads, other = ("char_ids", "token_ids") if use_character_inputs else ("token_ids", "char_ids")
        kind = "character" if use_character_inputs else "token-input"
        raise UserError(f"{who}: this is a {kind} biLM; it reads '{reads}', not '{other}'.")
    if inputs.shape.rank is None:
        raise UserError(f"{who}: ids of unknown rank; they must be {input_type} as the batchers give them.")
    max_chars = options.char_cnn.max_characters_per_token if use_character_inputs else None
    check_id_shape(inputs.shape, max_chars, who=f"{who}: {input_type.replace('_', ' ')}")
    return tf.cast(inputs, tf.int32)


@keras.saving.register_keras_serializable(package="bilm")
class TokenMask(keras.layers.Layer):
    """Which output positions are real tokens, from `ELMoEmbedding`'s inputs.

    Cheap (no biLM run): `''` padding for string tokens, zero ids for
    `Batcher` / `TokenBatcher` ids (whose two boundaries are dropped).

    Args:
        input_type, use_character_inputs: as in `ELMoEmbedding`.

    Call arguments:
        inputs: any input `ELMoEmbedding` accepts.

    Returns:
        bool `(batch, time)`.
    """

    def __init__(self, input_type="auto", use_character_inputs=True, **kwargs):
        super().__init__(**kwargs)
        self.input_type = input_type
        self.use_character_inputs = use_character_inputs

    def call(self, inputs):
        input_type = resolve_input_type(self.input_type, inputs, self.use_character_inputs)
        if input_type in ("tokens", "sentences"):
            tokens = sentences_to_tokens(inputs) if input_type == "sentences" else inputs
            return tf.sequence_mask(token_lengths(tokens), tf.shape(tokens)[1])
        real = tf.not_equal(inputs, 0)
        if input_type == "char_ids":
            real = tf.reduce_any(real, axis=-1)
        lengths = tf.maximum(tf.reduce_sum(tf.cast(real, tf.int32), axis=1) - 2, 0)
        return tf.sequence_mask(lengths, tf.shape(inputs)[1] - 2)

    def compute_output_spec(self, inputs):
        input_type = resolve_input_type(self.input_type, inputs, self.use_character_inputs)
        return keras.KerasTensor(output_time_shape(input_type, inputs.shape), dtype="bool")

    def get_config(self):
        config = super().get_config()
        config.update({"input_type": self.input_type, "use_character_inputs": self.use_character_inputs})
        return config
