"""Encode each distinct token of a batch once, then gather the results back."""
import keras
from keras import ops

from bilm.backend import fast_layer_call


@keras.saving.register_keras_serializable(package="bilm")
class UniqueTokens(keras.layers.Layer):
    """The distinct tokens of one or more char-id tensors.

    Natural text repeats tokens a lot (and the training streams hold the
    same tokens forwards and reversed); encoding each distinct char-id row
    once and gathering the results back gives the same values for much
    less work.

    Call arguments:
        char_ids: a list of int tensors `(batch_i, time_i, max_chars)`.

    Returns:
        `(unique_ids, indices)`: int `(1, n_unique, max_chars)` and one int
        `(batch_i, time_i)` index tensor per input, with
        `char_ids[i][b, t] == unique_ids[0, indices[i][b, t]]`.
        The distinct rows are the backend's own call (TensorFlow's in order
        of first appearance, PyTorch's and JAX's ascending). A function
        compiled with XLA has shapes that cannot depend on the ids: there,
        and in the portable code, every row stands for itself (the same
        values, without the saving), except on JAX inside a function traced
        for a known bound on the distinct rows (a training step on one
        device: `bilm.backend.jax.layer_calls.distinct_tokens_at_most`).
    """

    def call(self, char_ids):
        fast_call = fast_layer_call("unique_tokens")  # the backend's own (`bilm/backend/<name>/layer_calls.py`)
        if fast_call is not None:
            return fast_call(self, char_ids)
        return self.every_row(char_ids)

    def every_row(self, char_ids):
        """The portable result: every row of `char_ids` stands for itself (the same values, without the saving)."""
        indices, start = [], 0
        for ids in char_ids:
            count = ops.shape(ids)[0] * ops.shape(ids)[1]
            indices.append(ops.reshape(ops.arange(start, start + count, dtype="int32"), ops.shape(ids)[:2]))
            start = start + count
        rows = ops.concatenate([ops.reshape(ids, (-1, ops.shape(ids)[2])) for ids in char_ids], axis=0)
        return ops.expand_dims(rows, 0), indices

    def compute_output_spec(self, char_ids):
        return (keras.KerasTensor((1, None, char_ids[0].shape[2]), dtype=char_ids[0].dtype),
                [keras.KerasTensor(tuple(ids.shape[:2]), dtype="int32") for ids in char_ids])


@keras.saving.register_keras_serializable(package="bilm")
class GatherTokens(keras.layers.Layer):
    """Inverse of `UniqueTokens`: `(1, n_unique, dim)` features and a
    `(batch, time)` index -> `(batch, time, dim)`."""

    def call(self, unique_features, index):
        return ops.take(unique_features[0], ops.cast(index, "int32"), axis=0)

    def compute_output_shape(self, unique_features_shape, index_shape):
        return (*index_shape, unique_features_shape[-1])
