"""The biLM's outputs in ELMo form (`elmo_outputs`), and what `ELMoEmbedding` can return: its outputs'
names (TF-Hub's), which are sequences, and their shapes."""
import os

import keras
from keras import ops

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


def remove_sentence_boundaries(x, lengths):
    """Drops `<S>` and `</S>` from each row.

    Args:
        x: `(batch, ..., time, dim)` with time on axis -2, zeros past lengths.
        lengths: `(batch,)` valid steps per row, boundaries included.

    Returns:
        `(batch, ..., time - 2, dim)`: position k holds input position k + 1
        for k < length - 2, zeros beyond.
    """
    inner = x[..., 1:-1, :]
    positions = ops.arange(ops.shape(inner)[-2], dtype="int32")
    keep = ops.expand_dims(positions, 0) < ops.expand_dims(ops.cast(lengths, "int32") - 2, 1)  # (batch, time - 2)
    for _ in range(len(x.shape) - 3):  # the axes between batch and time
        keep = ops.expand_dims(keep, 1)
    return inner * ops.cast(ops.expand_dims(keep, -1), x.dtype)


def elmo_outputs(model_outputs, n_layers):
    """The biLM's outputs in ELMo form, from a `build_bilm` model's output dict.

    Returns a dict:
        `lm_embeddings` `(batch, n_layers + 1, time - 2, 2 * projection_dim)`:
            layer 0 is the token encoding duplicated `[x, x]`, layer l is
            `[forward_l, backward_l]`; boundaries removed, zeros past lengths.
        `lengths` `(batch,)` tokens per row without boundaries.
        `mask` `(batch, time - 2)` bool.
        `token_embeddings` `(batch, time, projection_dim)`, with boundaries.
    """
    x = model_outputs["token_embeddings"]
    layers = [ops.concatenate([x, x], axis=-1)]
    for layer in range(n_layers):
        layers.append(ops.concatenate(
            [model_outputs[f"forward_{layer}"], model_outputs[f"backward_{layer}"]], axis=-1))
    lengths = ops.cast(model_outputs["lengths"], "int32")
    lm_embeddings = remove_sentence_boundaries(ops.stack(layers, axis=1), lengths)
    inner_lengths = ops.maximum(lengths - 2, 0)
    mask = (ops.expand_dims(ops.arange(ops.shape(lm_embeddings)[2], dtype="int32"), 0)
            < ops.expand_dims(inner_lengths, 1))
    return {"lm_embeddings": lm_embeddings, "lengths": inner_lengths, "mask": mask,
            "token_embeddings": x}


def named_outputs(lm_embeddings, elmo, mask, lengths, projection_dim, n_layers):
    """Every output of `ELMoEmbedding` by its name (TF-Hub's), from `elmo_outputs`' `lm_embeddings`, `mask` and
    `lengths` (a biLM of `n_layers`) and the mixed layers `elmo` `(batch, time, 2 * projection_dim)`, zero at
    padding: `word_emb`,
    `lstm_outputs{l}`, `elmo`, `default` (the mean of `elmo` over each row's tokens; zeros for an empty row),
    `mask` and `sequence_len`."""
    count = ops.expand_dims(ops.cast(ops.maximum(lengths, 1), elmo.dtype), -1)
    outputs = {"word_emb": lm_embeddings[:, 0, :, :projection_dim]}
    for layer, name in enumerate(lstm_output_names(n_layers), start=1):
        outputs[name] = lm_embeddings[:, layer]
    outputs.update(elmo=elmo, default=ops.sum(elmo, axis=1) / count, mask=mask, sequence_len=lengths)
    return outputs
