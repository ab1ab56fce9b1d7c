"""Dropout whose mask is a pure function of a seed input."""
import keras

from bilm.backend import backend_module


@keras.saving.register_keras_serializable(package="bilm")
class StatelessDropout(keras.layers.Layer):
    """Dropout with a mask drawn from `(seed, site)` only.

    Training passes a fresh seed per step (and per replica), so the masks
    are reproducible after a restart and differ between replicas, with no
    random state to checkpoint or synchronise. The masks are TensorFlow's
    stateless dropout's, compiled with XLA or not, and on JAX and PyTorch the
    same masks from the same seed (`bilm.backend.<name>.random`).

    Args:
        rate: fraction of units dropped.
        site: an integer told apart from the other dropout layers of the
            model, folded into the seed.

    Call arguments:
        inputs: float tensor of any shape.
        seed: int `(2,)` stateless seed (on JAX and PyTorch, its `(4,)` 32-bit
            words: `seed_words` of `bilm.backend.jax.random`, `bilm.backend.torch.random`).
        training: apply dropout only when True.
    """

    def __init__(self, rate, site, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.site = site

    def call(self, inputs, seed, training=None):
        if not training or self.rate == 0.0:
            return inputs
        random = backend_module("random")  # TensorFlow's numbers on every backend (`bilm.backend.<name>.random`)
        return random.dropout(inputs, self.rate, random.fold_in_int32(seed, self.site))

    def compute_output_shape(self, inputs_shape, seed_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "site": self.site})
        return config


def dropout_site(direction_index, layer, n_layers):
    """A distinct site number for each dropout point (layer == n_layers: the top)."""
    return direction_index * (n_layers + 1) + layer
