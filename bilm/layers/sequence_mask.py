"""`SequenceMask`: which positions of a batch of ids hold real tokens."""
import keras
from keras import ops


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
            return ops.ones(ops.shape(ids)[:2], "bool")
        if len(ids.shape) == 3:
            return ops.any(ops.not_equal(ids, 0), axis=-1)
        return ops.not_equal(ids, 0)

    def compute_output_spec(self, ids):
        return keras.KerasTensor(tuple(ids.shape[:2]), dtype="bool")

    def get_config(self):
        config = super().get_config()
        config.update({"padded": self.padded})
        return config
