"""What `ELMoEmbedding` can return: its outputs' names (TF-Hub's), which are sequences, and their shapes."""
import os

import keras

from bilm.errors import UserError

# Outputs whose first two axes are (batch, time): Keras masks them.
SEQUENCE_OUTPUTS = ("word_emb", "elmo")


def lstm_output_names(n_layers):
    """`("lstm_outputs1", ..., "lstm_outputs{n_layers}")`."""
    return tuple(f"lstm_outputs{layer}" for layer in range(1, n_layers + 1))


def sequence_output_names(n_layers):
    """The outputs masked by token: `word_emb`, `elmo` and every `lstm_outputs{l}`."""
    return (*SEQUENCE_OUTPUTS, *lstm_output_names(n_layers))


def check_output(output, n_layers):
    """Returns `output` if it names an output of a biLM of `n_layers` (or `"all"`); else one `UserError`,
    which for a weight file's path says how weights are loaded."""
    names = ("word_emb", *lstm_output_names(n_layers), "elmo", "default", "all")
    if output in names:
        return output
    if isinstance(output, (str, os.PathLike)) and os.fspath(output).endswith((".hdf5", ".h5")):
        raise UserError(
            f"ELMoEmbedding(options, ...) builds the layer's architecture; it takes no weight file "
            f"(received {os.fspath(output)!r} as output). Load weights with "
            "ELMoEmbedding.from_files(options_file, weight_file, ...).")
    raise UserError(f"output must be one of {names}. Received: output={output!r}")


def output_specs(batch, time, projection_dim, n_layers):
    """`{name: keras.KerasTensor}` of every output for `(batch, time)` tokens (see `ELMoEmbedding`)."""
    p = projection_dim
    specs = {"word_emb": keras.KerasTensor((batch, time, p))}
    for name in lstm_output_names(n_layers):
        specs[name] = keras.KerasTensor((batch, time, 2 * p))
    specs["elmo"] = keras.KerasTensor((batch, time, 2 * p))
    specs["default"] = keras.KerasTensor((batch, 2 * p))
    specs["mask"] = keras.KerasTensor((batch, time), dtype="bool")
    specs["sequence_len"] = keras.KerasTensor((batch,), dtype="int32")
    return specs
