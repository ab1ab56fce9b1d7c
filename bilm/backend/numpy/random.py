"""Keras's NumPy backend draws no random numbers for training (bilm trains on TensorFlow, JAX and PyTorch):
each of the names every backend's `random` exports is one clear error."""
from bilm.errors import UserError

# A seed's shape and dtype as a network input (`build_bilm`'s `dropout_seed`): a placeholder's (NumPy draws none).
SEED_SHAPE, SEED_DTYPE = (2,), "int32"


def _not_on_numpy(*args, **kwargs):
    raise UserError("Dropout in training draws TensorFlow's stateless random numbers, which bilm computes on "
                    "TensorFlow, JAX and PyTorch; Keras runs on NumPy (KERAS_BACKEND=numpy). Set KERAS_BACKEND to "
                    "tensorflow, jax or torch, or call the layer with training=False.")


seed_words = fold_in = fold_in_int32 = uniform = dropout = _not_on_numpy
