"""The opt-in bfloat16 matmuls: training's (what is rounded, its gradients, unknown dtypes) and
inference's (bfloat16 kernels: a network's tolerance, loading and saving weights)."""
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as R
from bilm.io.formats.weight_file import load_bilm_weights, save_bilm_weights
from bilm.layers.highway import Highway
from bilm.models.functional_bilm import build_bilm, state_keys
from bilm.models.random_weights import write_random_model
from bilm.ops import placement
from bilm.ops.batch_invariant import batch_invariant_matmul
from bilm.ops.matmul_dtype import BFLOAT16_INFERENCE_TOLERANCE, kernel_matmul, matmul, stock_form
from bilm.options import load_options
from helpers import SENTENCES

# bfloat16 keeps 8 significant bits: one rounding to nearest is off by at
# most half a unit in the last place, 2**-8 relative.
BF16_ROUNDING = 2.0 ** -8


def to_bfloat16_and_back(x):
    return tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy().astype(np.float64)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True)])
def test_bfloat16_matmul_rounds_operands_and_result_once(transpose_a, transpose_b):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 300) if not transpose_a else (300, 40)).astype(np.float32)
    b = rng.normal(size=(300, 24) if not transpose_b else (24, 300)).astype(np.float32)
    got = matmul(a, b, "bfloat16", transpose_a=transpose_a, transpose_b=transpose_b).numpy()
    a64, b64 = to_bfloat16_and_back(a), to_bfloat16_and_back(b)
    exact = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    assert got.dtype == np.float32 and got.shape == (40, 24)
    # Accumulated in float32: within a few bfloat16 roundings of the exact
    # product of the rounded operands. CPUs with bfloat16 instructions round
    # the result once; others (AVX2) round partial sums over blocks of the
    # inner dimension too, up to 0.35 of this bound here. Accumulating the 300
    # terms in bfloat16 would be off by 1.8 times the bound.
    magnitude = np.abs(a64.T if transpose_a else a64) @ np.abs(b64.T if transpose_b else b64)
    np.testing.assert_array_less(np.abs(got - exact), BF16_ROUNDING * magnitude)
    full = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
    assert np.abs(got - full).max() > 1e-3  # the operands really were rounded
    np.testing.assert_allclose(matmul(a, b, "float32", transpose_a, transpose_b).numpy(), full, rtol=1e-4, atol=1e-4)


def test_bfloat16_matmul_gradients_are_close_to_float32_ones():
    rng = np.random.default_rng(1)
    a = tf.constant(rng.normal(size=(30, 64)), tf.float32)
    b = tf.constant(rng.normal(size=(64, 20)), tf.float32)
    upstream = tf.constant(rng.normal(size=(30, 20)), tf.float32)
    grads = {}
    for dtype in ("float32", "bfloat16"):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            y = tf.reduce_sum(matmul(a, b, dtype) * upstream)
        grads[dtype] = [g.numpy() for g in tape.gradient(y, [a, b])]
        assert all(g.dtype == np.float32 for g in grads[dtype])
    for g16, g32 in zip(grads["bfloat16"], grads["float32"]):
        np.testing.assert_allclose(g16, g32, rtol=0.03, atol=0.03 * np.abs(g32).max())
        assert not np.array_equal(g16, g32)


def test_unknown_matmul_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="matmul_dtype must be one of 'float32', 'bfloat16', got 'float16'"):
        matmul(tf.ones([2, 2]), tf.ones([2, 2]), "float16")
    with pytest.raises(ValueError, match="matmul_dtype must be one of"):
        Highway(1, training_matmul_dtype="half")


def test_kernel_matmul_takes_the_kernels_dtype():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, 40)).astype(np.float32)
    kernel = rng.normal(size=(40, 7)).astype(np.float32)
    # A float32 kernel: the batch-invariant product (bilm's kernel where it is built, else stock).
    got = kernel_matmul(x, tf.constant(kernel)).numpy()
    np.testing.assert_array_equal(got, batch_invariant_matmul(x, tf.constant(kernel)).numpy())
    np.testing.assert_allclose(got, x.astype(np.float64) @ kernel, rtol=1e-5, atol=1e-5)
    got = kernel_matmul(x, tf.cast(kernel, tf.bfloat16)).numpy()
    assert got.dtype == np.float32


@pytest.mark.parametrize("bfloat16_arithmetic", [True, False])
def test_a_bfloat16_kernel_rounds_x_only_where_the_cpu_multiplies_bfloat16(bfloat16_arithmetic, monkeypatch):
    # Elsewhere TensorFlow's bfloat16 product is slower than float32's: the
    # kernel is widened (exactly) and x stays float32, in one product or
    # once for a loop's (stock_form).
    monkeypatch.setattr(placement, "has_bfloat16_arithmetic", lambda: bfloat16_arithmetic)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, 40)).astype(np.float32)
    kernel = tf.cast(rng.normal(size=(40, 7)).astype(np.float32), tf.bfloat16)
    rounded = matmul(x, tf.cast(kernel, tf.float32), "bfloat16").numpy()
    widened = tf.matmul(x, tf.cast(kernel, tf.float32)).numpy()
    assert not np.allclose(rounded, widened, rtol=1e-5, atol=1e-5)
    # (The widened product is a float32 one: the batch-invariant product's round-off apart from tf.matmul's.)
    np.testing.assert_allclose(kernel_matmul(x, kernel).numpy(), rounded if bfloat16_arithmetic else widened,
                               rtol=1e-5, atol=1e-5)
    stock = stock_form(kernel)
    assert stock.dtype == (tf.bfloat16 if bfloat16_arithmetic else tf.float32)
    np.testing.assert_allclose(kernel_matmul(x, stock).numpy(), rounded if bfloat16_arithmetic else widened,
                               rtol=1e-5, atol=1e-5)


def _network(options_file, weight_file, kernel_dtype):
    model = build_bilm(load_options(options_file).for_prediction(), kernel_dtype=kernel_dtype)
    load_bilm_weights(model, weight_file)
    return model


def _run(model, options, ids):
    inputs = {"token_characters": ids}
    inputs.update({key: tf.zeros([ids.shape[0], size]) for key, _, size in state_keys(options)})
    outputs = model(inputs, training=False)
    names = ["token_embeddings"] + [f"{d}_{layer}" for d in ("forward", "backward") for layer in range(2)]
    return {name: outputs[name].numpy() for name in names}


def test_bfloat16_inference_network_stays_within_its_tolerance_and_follows_loaded_weights(tmp_path):
    """A `build_bilm(kernel_dtype="bfloat16")` network against
    float32, with weights initialised as bilm initialises them (as the
    benchmarks' random models are).

    Tolerance: every token's vector of every layer within
    `BFLOAT16_INFERENCE_TOLERANCE` (3%, relative, Euclidean) of float32's.
    bfloat16 rounds each operand and product to 2**-9 relative (8
    significant bits); with these weights the gates' slopes and the forget
    gate damp a perturbation from step to step, so a layer's vectors
    deviate by a few tenths of a percent (up to 0.9% here, 0.4-0.7% at the
    released sizes). The outputs must differ by more than float32
    round-off, so bfloat16 was used.

    Loading other weights is what the next call uses, and saving writes the
    bfloat16 kernels (as float32 datasets).
    """
    options_file, weight_file = write_random_model(str(tmp_path / "first"), R.make_options(), seed=0)
    _, other_weight_file = write_random_model(str(tmp_path / "second"), R.make_options(), seed=1)
    options = load_options(options_file).for_prediction()
    ids = tf.constant(R.char_ids(SENTENCES, options.char_cnn.max_characters_per_token))
    valid = R.sequence_lengths(ids.numpy())[:, None] > np.arange(ids.shape[1])[None, :]
    model = _network(options_file, weight_file, "bfloat16")
    got, want = _run(model, options, ids), _run(_network(options_file, weight_file, "float32"), options, ids)
    for name in want:
        g, w = got[name][valid].astype(np.float64), want[name][valid].astype(np.float64)
        deviations = np.linalg.norm(g - w, axis=-1) / np.linalg.norm(w, axis=-1)
        assert deviations.max() < BFLOAT16_INFERENCE_TOLERANCE, name
        assert deviations.max() > 1e-5, name
        np.testing.assert_array_equal(got[name][~valid], 0.0)

    load_bilm_weights(model, other_weight_file)
    again = _run(model, options, ids)
    fresh = _run(_network(options_file, other_weight_file, "bfloat16"), options, ids)
    for name in fresh:
        np.testing.assert_array_equal(again[name], fresh[name])
        assert not np.allclose(again[name][valid], got[name][valid])
    saved = str(tmp_path / "saved.hdf5")
    save_bilm_weights(model, saved)
    written, loaded = R.read_weights(saved), R.read_weights(other_weight_file)
    recurrent = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"
    assert written[recurrent].dtype == np.float32
    np.testing.assert_array_equal(written[recurrent],
                                  tf.cast(tf.cast(loaded[recurrent], tf.bfloat16), tf.float32).numpy())
