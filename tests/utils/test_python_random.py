"""`seeded_python_random`: a block whose seedless Keras initializers draw from a seed, with Python's generator
put back as it was after it."""
import random

import keras
import numpy as np

from bilm.utils.python_random import seeded_python_random


def _initial_weights():
    return keras.ops.convert_to_numpy(keras.initializers.GlorotUniform()((4, 3)))


def test_the_block_gives_set_random_seeds_weights_and_leaves_pythons_generator_as_it_was():
    random.seed(11)
    expected_next = [random.random() for _ in range(3)]
    random.seed(11)
    with seeded_python_random(5):
        first = _initial_weights()
    with seeded_python_random(5):
        again = _initial_weights()
    assert [random.random() for _ in range(3)] == expected_next  # as if the blocks had not run
    with seeded_python_random(6):
        other = _initial_weights()
    keras.utils.set_random_seed(5)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, _initial_weights())
    assert not np.array_equal(first, other)
