"""StatelessDropout: a mask that is a pure function of (seed, site), inverted scaling, identity outside training."""
import numpy as np
import pytest
import tensorflow as tf

from backend_processes import run_on_backend
from bilm.layers.stateless_dropout import StatelessDropout, dropout_site
from layer_testing import run_layer_test

X = np.arange(1, 2 * 3 * 40 + 1, dtype=np.float32).reshape(2, 3, 40)
SEED = np.array([7, 11], np.int64)


@pytest.mark.parametrize("training", [False, True])
def test_layer_contract(training):
    run_layer_test(StatelessDropout, {"rate": 0.5, "site": 3}, {"inputs": X, "seed": SEED},
                   expected_output_shape=(2, 3, 40), expected_output_dtype="float32",
                   call_kwargs={"training": training})


def test_training_drops_a_rate_of_the_units_and_scales_the_rest():
    out = StatelessDropout(0.25, site=0)(X, SEED, training=True).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], X[kept] / 0.75, rtol=1e-6)
    assert 0.15 < 1 - kept.mean() < 0.35


def test_the_mask_is_a_pure_function_of_the_seed_and_the_site():
    def mask(site, seed):
        return StatelessDropout(0.5, site)(X, tf.constant(seed, tf.int64), training=True).numpy() != 0

    np.testing.assert_array_equal(mask(1, [7, 11]), mask(1, [7, 11]))
    assert not np.array_equal(mask(1, [7, 11]), mask(2, [7, 11]))
    assert not np.array_equal(mask(1, [7, 11]), mask(1, [7, 12]))


@pytest.mark.parametrize("rate, training", [(0.5, False), (0.5, None), (0.0, True)])
def test_outside_training_or_at_rate_zero_it_is_the_identity(rate, training):
    np.testing.assert_array_equal(StatelessDropout(rate, 0)(X, SEED, training=training).numpy(), X)


def test_each_dropout_point_has_its_own_site():
    n_layers = 2
    sites = [dropout_site(d, layer, n_layers) for d in range(2) for layer in range(n_layers + 1)]
    assert sorted(sites) == list(range(2 * (n_layers + 1)))


def test_masks_of_other_steps_and_sites_are_uncorrelated():
    # The training step's seed is fold_in((seed, step), replica); each site folds in its number.
    inputs = np.ones((8, 20, 64), np.float32)
    masks = []
    for step in range(4):
        step_seed = tf.random.experimental.stateless_fold_in(tf.constant([0, step], tf.int64), 0)
        for site in (0, 1, 2, 3):
            kept = StatelessDropout(0.1, site)(inputs, step_seed, training=True).numpy() != 0
            assert abs(kept.mean() - 0.9) < 0.02
            masks.append(kept.ravel().astype(np.float64))
    correlations = np.corrcoef(np.stack(masks))[np.triu_indices(len(masks), 1)]
    # Independent masks of n units: each correlation about N(0, 1/n).
    assert np.abs(correlations).max() * np.sqrt(masks[0].size) < 5.0


ON_BACKEND = """
import json, sys
import numpy as np
import keras
from bilm.backend import backend_module
from bilm.layers.stateless_dropout import StatelessDropout

seed_words = backend_module("random").seed_words
x = np.load(sys.argv[1])
out = StatelessDropout(0.3, site=4)(x, seed_words(7, 11), training=True)
np.save(sys.argv[2], keras.ops.convert_to_numpy(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_jax_and_pytorch_drop_tensorflows_units(tmp_path, backend):
    np.save(tmp_path / "x.npy", X)
    run_on_backend(backend, ON_BACKEND, tmp_path / "x.npy", tmp_path / "out.npy")
    want = StatelessDropout(0.3, site=4)(X, SEED, training=True).numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), want)
    assert 0.2 < np.mean(want == 0) < 0.4
