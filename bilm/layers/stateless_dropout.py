"""Dropout whose mask is a pure function of a seed input."""
import keras

from bilm.utils.backend import configured_backend, require_tensorflow


@keras.saving.register_keras_serializable(package="bilm")
class StatelessDropout(keras.layers.Layer):
    """Dropout with a mask drawn from `(seed, site)` only.

    Training passes a fresh seed per step (and per replica), so the masks
    are reproducible after a restart and differ between replicas, with no
    random state to checkpoint or synchronise. The masks are TensorFlow's
    stateless dropout's, compiled with XLA or not (`bilm.ops.stateless_random`),
    and on JAX the same masks from the same seed (`bilm.ops.jax_random`).

    Args:
        rate: fraction of units dropped.
        site: an integer told apart from the other dropout layers of the
            model, folded into the seed.

    Call arguments:
        inputs: float tensor of any shape.
        seed: int `(2,)` stateless seed (on JAX, its uint32 `(4,)` words:
            `bilm.ops.jax_random`).
        training: apply dropout only when True.
    """

    def __init__(self, rate, site, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.site = site

    def call(self, inputs, seed, training=None):
        if not training or self.rate == 0.0:
            return inputs
        if configured_backend() == "jax":
            from bilm.ops import jax_random

            return jax_random.dropout(inputs, self.rate, jax_random.fold_in_int32(seed, self.site))
        require_tensorflow("dropout in training (bilm's stateless masks; on TensorFlow or JAX)")
        import tensorflow as tf

        from bilm.ops import stateless_random

        # bilm's stateless draws: the same masks in a step compiled with XLA as in one that is not.
        seed = stateless_random.fold_in(tf.cast(seed, tf.int64), self.site)
        return stateless_random.dropout(inputs, self.rate, seed)

    def compute_output_shape(self, inputs_shape, seed_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "site": self.site})
        return config


def dropout_site(direction_index, layer, n_layers):
    """A distinct site number for each dropout point (layer == n_layers: the top)."""
    return direction_index * (n_layers + 1) + layer
