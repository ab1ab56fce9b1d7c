"""Text to a biLM's ids, the one policy of every path: the batcher (Python), the same in the graph, and what
`ELMoEmbedding` accepts (text or ids, validated) with its mask.

A character model's tokens become UTF-8 byte ids (`Batcher`,
`batch_char_ids`), or ids from the model's own dictionaries when its
options have them (`bilm.text.dictionary_ids`); a token-input model's
become ids of its vocabulary (`TokenBatcher`, `batch_token_ids`).
"""
import keras
import numpy as np
from keras import ops

from bilm.errors import UserError
from bilm.text.batching import Batcher, check_id_shape
from bilm.text.dictionary_ids import DictionaryBatcher
from bilm.utils.backend import on_tensorflow, require_tensorflow

INPUT_TYPES = ("auto", "tokens", "sentences", "char_ids", "token_ids")
# The input types that are text (strings), turned into ids inside the graph.
TEXT_INPUT_TYPES = ("tokens", "sentences")


def batcher_for(options, vocab_file=None):
    """The batcher of a character model: `Batcher(vocab_file, C)` for byte ids (the vocabulary only caches
    them), a `DictionaryBatcher` for a model's own dictionaries (which need no vocabulary)."""
    cnn = options.char_cnn
    if cnn.characters is not None:
        words = options.word_embedding.dictionary if options.word_embedding is not None else None
        return DictionaryBatcher(cnn.characters, words, cnn.max_characters_per_token)
    return Batcher(vocab_file, cnn.max_characters_per_token)


def dictionary_tables_for(options):
    """The in-graph `DictionaryTables` of a model with its own dictionaries, else None (TensorFlow's)."""
    cnn = options.char_cnn
    if cnn is None or cnn.characters is None:
        return None
    from bilm.text.graph_dictionary_ids import dictionary_tables

    words = options.word_embedding.dictionary if options.word_embedding is not None else None
    return dictionary_tables(cnn.characters, words, cnn.max_characters_per_token)


def tokens_to_ids(tokens, options, use_character_inputs, tables=None, sequence_len=None):
    """String tokens `(batch, time)` -> the biLM's ids, in the graph.

    Args:
        tokens, sequence_len: as `bilm.text.graph_batching.batch_char_ids` takes them.
        options: prediction `BiLMOptions`.
        use_character_inputs: a character biLM (else token ids).
        tables: the model's lookup tables: `DictionaryTables` (see
            `dictionary_tables_for`) or a token-input model's `TokenVocabTable`.

    Returns:
        int32 `(batch, time + 2, token_id_width)` or `(batch, time + 2)`.
    """
    from bilm.text.graph_batching import batch_char_ids, batch_token_ids
    from bilm.text.graph_dictionary_ids import batch_dictionary_ids

    if not use_character_inputs:
        return batch_token_ids(tokens, tables, sequence_len)
    if options.char_cnn.characters is not None:
        return batch_dictionary_ids(tokens, tables, sequence_len)
    return batch_char_ids(tokens, options.char_cnn.max_characters_per_token, sequence_len)


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


def inputs_to_ids(inputs, requested_type, options, use_character_inputs, tables=None, sequence_len=None,
                  who="ELMoEmbedding"):
    """The biLM's ids for any input `ELMoEmbedding` accepts, validated.

    Args:
        inputs: string tokens `(batch, time)`, string sentences `(batch,)`,
            char ids `(batch, time + 2, token_id_width)` or token ids
            `(batch, time + 2)`.
        requested_type: one of `INPUT_TYPES` (`"auto"` decides from the
            dtype and rank).
        options: prediction `BiLMOptions`.
        use_character_inputs: a character biLM (else token ids).
        tables: the lookup tables of `tokens_to_ids` for text: a token-input
            biLM's `TokenVocabTable`, or `DictionaryTables`.
        sequence_len: optional int `(batch,)` tokens per row, for string
            tokens only: every token inside the length is real, even `''`.
        who: what error messages start with.

    Returns:
        int32 `(batch, time + 2, token_id_width)` char ids or `(batch, time
        + 2)` token ids, as the batchers give them.
    """
    inputs = _as_tensor(inputs)
    input_type = resolve_input_type(requested_type, inputs, use_character_inputs)
    dtype = keras.backend.standardize_dtype(inputs.dtype)
    is_string = dtype == "string"
    if input_type in ("tokens", "sentences"):
        require_tensorflow(f"{who} given text (strings, split and looked up in the graph)")
        from bilm.text.graph_batching import sentences_to_tokens

        if not is_string:
            raise TypeError(
                f"{who}: input_type={input_type!r} needs a string tensor (padding ''). "
                f"Received dtype {dtype}, shape {tuple(inputs.shape)}; integer ids need "
                "input_type='char_ids' (from Batcher) or 'token_ids' (from TokenBatcher).")
        if not use_character_inputs and tables is None:
            raise UserError(
                f"{who}: a token-input biLM given text needs vocab_file= (the biLM's vocabulary).")
        if input_type == "sentences":
            if sequence_len is not None:
                raise UserError(f"{who}: sequence_len is only for input_type='tokens'.")
            tokens = sentences_to_tokens(inputs)
        else:
            tokens = inputs
        return tokens_to_ids(tokens, options, use_character_inputs, tables, sequence_len)
    if sequence_len is not None:
        raise UserError(f"{who}: sequence_len is only for string tokens; ids carry their lengths.")
    if is_string or "int" not in dtype:
        raise TypeError(
            f"{who} takes string tokens (batch, time), string sentences (batch,) or integer "
            f"{input_type} from {'Batcher' if input_type == 'char_ids' else 'TokenBatcher'} "
            f"(input_type={requested_type!r}). Received dtype {dtype}, "
            f"shape {tuple(inputs.shape)}.")
    if (input_type == "char_ids") != use_character_inputs:
        reads, other = ("char_ids", "token_ids") if use_character_inputs else ("token_ids", "char_ids")
        kind = "character" if use_character_inputs else "token-input"
        raise UserError(f"{who}: this is a {kind} biLM; it reads '{reads}', not '{other}'.")
    if inputs.shape is None or getattr(inputs.shape, "rank", 0) is None:
        raise UserError(f"{who}: ids of unknown rank; they must be {input_type} as the batchers give them.")
    width = options.token_id_width if use_character_inputs else None
    check_id_shape(tuple(inputs.shape), width, who=f"{who}: {input_type.replace('_', ' ')}")
    return ops.cast(inputs, "int32")


def _as_tensor(inputs):
    """`inputs` as a tensor of the backend (strings: TensorFlow's, the only backend with string tensors)."""
    if on_tensorflow():
        import tensorflow as tf

        return inputs if isinstance(inputs, tf.Tensor) else tf.convert_to_tensor(inputs)
    if keras.backend.is_keras_tensor(inputs) or keras.ops.is_tensor(inputs):
        return inputs
    return ops.convert_to_tensor(inputs)


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
            import tensorflow as tf  # strings are TensorFlow's

            from bilm.text.graph_batching import sentences_to_tokens, token_lengths

            tokens = sentences_to_tokens(inputs) if input_type == "sentences" else inputs
            return tf.sequence_mask(token_lengths(tokens), tf.shape(tokens)[1])
        real = ops.not_equal(inputs, 0)
        if input_type == "char_ids":
            real = ops.any(real, axis=-1)
        lengths = ops.maximum(ops.sum(ops.cast(real, "int32"), axis=1) - 2, 0)
        positions = ops.arange(ops.shape(inputs)[1] - 2, dtype="int32")
        return ops.expand_dims(positions, 0) < ops.expand_dims(lengths, 1)

    def compute_output_spec(self, inputs):
        input_type = resolve_input_type(self.input_type, inputs, self.use_character_inputs)
        return keras.KerasTensor(output_time_shape(input_type, inputs.shape), dtype="bool")

    def get_config(self):
        config = super().get_config()
        config.update({"input_type": self.input_type, "use_character_inputs": self.use_character_inputs})
        return config


def token_vocab_table_for(vocabulary):
    """A token-input layer's in-graph vocabulary (TensorFlow's, for text inputs), or None."""
    if vocabulary is None:
        return None
    require_tensorflow("ELMoEmbedding(vocabulary=...) (text inputs to a token-input biLM)")
    from bilm.text.graph_batching import token_vocab_table

    return token_vocab_table(vocabulary)


def compiling_text_with_xla():
    """Whether a function compiled with XLA is being traced (text inputs cannot be: string ops)."""
    if not on_tensorflow():
        return False
    from bilm.ops.placement import compiling_with_xla

    return compiling_with_xla()


def is_text(inputs):
    """Whether `inputs` (NumPy, a list, a tensor) hold strings."""
    if isinstance(inputs, (list, tuple, np.ndarray, str, bytes)):
        return np.asarray(inputs).dtype.kind in "USO"
    return keras.backend.standardize_dtype(getattr(inputs, "dtype", "float32")) == "string"
