"""A randomly initialised biLM on disk: options + weights in the original layout.

For examples, benchmarks and smoke tests that need a model but no download.
"""
import os

import keras

from bilm.io.formats.weight_file import save_bilm_weights
from bilm.models.functional_bilm import build_bilm
from bilm.options import load_options, save_options


def write_random_model(directory, options, seed=None):
    """Writes `options.json` and `weights.hdf5` of a random biLM to `directory`.

    Args:
        directory: folder to write into (created if missing).
        options: options dict, `BiLMOptions`, or path (char inputs).
        seed: None draws from the process's random state as it is (other
            weights every run); an int first calls
            `keras.utils.set_random_seed(seed)`, which reseeds Python's,
            NumPy's and TensorFlow's global generators, so the same seed
            writes the same weights.

    Returns:
        `(options_file, weight_file)` paths.
    """
    os.makedirs(directory, exist_ok=True)
    options = load_options(options).for_prediction()
    if seed is not None:
        keras.utils.set_random_seed(seed)
    model = build_bilm(options)
    options_file = os.path.join(directory, "options.json")
    weight_file = os.path.join(directory, "weights.hdf5")
    save_options(options, options_file)
    save_bilm_weights(model, weight_file)
    return options_file, weight_file
