"""bilm.backend.<name>.random: every backend's folder exports the same names, TensorFlow's module draws what JAX's
computes from the same seed, and Keras's NumPy backend says in one line that it draws none."""
import importlib

import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

from bilm.backend import FOLDERS
from bilm.backend.jax import random as jax_random
from bilm.backend.tensorflow import random as tensorflow_random
from bilm.errors import UserError

SHARED = ("seed_words", "fold_in", "fold_in_int32", "uniform", "dropout")


def _int64(words):
    words = np.asarray(words).astype(np.uint64)
    return (words[0::2] | (words[1::2] << np.uint64(32))).view(np.int64)


def test_every_folder_exports_the_shared_names_and_its_seeds_are_of_its_seed_shape():
    for folder in FOLDERS:
        module = importlib.import_module(f"bilm.backend.{folder}.random")
        assert all(callable(getattr(module, name, None)) for name in SHARED), folder
        if folder != "numpy":
            seed = np.asarray(module.seed_words(7, -3))
            assert (seed.shape, str(seed.dtype)) == (module.SEED_SHAPE, module.SEED_DTYPE), folder


@pytest.mark.parametrize("first, second", [(7, 11), (-143040582, 3), (2 ** 40, -(2 ** 50))])
def test_tensorflows_numbers_are_jaxs(first, second):
    x = np.random.default_rng(0).normal(size=(5, 21)).astype(np.float32)
    seed_tf, seed_jax = tensorflow_random.seed_words(first, second), jax_random.seed_words(first, second)
    np.testing.assert_array_equal(seed_tf.numpy(), _int64(seed_jax))
    for data in (3, -5):
        np.testing.assert_array_equal(tensorflow_random.fold_in(seed_tf, data).numpy(),
                                      _int64(jax_random.fold_in(seed_jax, data)))
        np.testing.assert_array_equal(tensorflow_random.fold_in_int32(seed_tf, data).numpy(),
                                      _int64(jax_random.fold_in_int32(seed_jax, data)))
    folded_tf, folded_jax = tensorflow_random.fold_in_int32(seed_tf, 4), jax_random.fold_in_int32(seed_jax, 4)
    np.testing.assert_array_equal(tensorflow_random.uniform(folded_tf, (9, 4)).numpy(),
                                  np.asarray(jax_random.uniform(folded_jax, (9, 4))))
    dropped = tensorflow_random.dropout(tf.constant(x), 0.3, folded_tf).numpy()
    np.testing.assert_array_equal(dropped, np.asarray(jax_random.dropout(jnp.asarray(x), 0.3, folded_jax)))
    assert 0.1 < np.mean(dropped == 0) < 0.5
    assert tensorflow_random.dropout(x, 0.0, folded_tf) is x


def test_numpy_backend_draws_none_and_says_so():
    from bilm.backend.numpy import random as numpy_random

    with pytest.raises(UserError, match="KERAS_BACKEND=numpy.*training=False"):
        numpy_random.dropout(np.ones(3), 0.5, np.zeros(2))
