"""ProjectedLSTM: the layer contract, training and inference agree, empty inputs, distinct rows, when XLA is
used, bfloat16 in training, bfloat16 inference (its tolerance, its kernels, assigned weights)."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.layers.projected_lstm import ProjectedLSTM
from bilm.ops.matmul_dtype import BFLOAT16_INFERENCE_TOLERANCE
from layer_testing import run_layer_test

_RNG = np.random.default_rng(0)
# A batch of 2 rows of 4 steps of 3 features (the second row 2 steps long), and an initial state.
X = _RNG.normal(size=(2, 4, 3)).astype(np.float32)
LENGTHS = np.array([4, 2], np.int32)
C0, H0 = _RNG.normal(size=(2, 5)).astype(np.float32), _RNG.normal(size=(2, 2)).astype(np.float32)


# jit_compile=False: the graph loops, which compile much faster than XLA's
# (the tests below compare the XLA loops with them).
@pytest.mark.parametrize("kwargs", [
    {"units": 5, "projection_dim": 2, "cell_clip": 3.0, "proj_clip": 3.0, "go_backwards": True, "jit_compile": False},
    # The config keeps both dtypes; a bfloat16-kernel layer refuses training, so it takes no step.
    {"units": 5, "projection_dim": 2, "training_matmul_dtype": "bfloat16", "jit_compile": False},
    {"units": 5, "projection_dim": 2, "kernel_dtype": "bfloat16", "jit_compile": False},
])
def test_layer_contract(kwargs):
    # Weights: input kernel, recurrent kernel, bias, projection kernel.
    run_layer_test(ProjectedLSTM, kwargs, {"inputs": X, "lengths": LENGTHS, "initial_state": [C0, H0]},
                   expected_output_shape=((2, 4, 2), (2, 5), (2, 2)), expected_num_trainable_weights=4,
                   expected_output_dtype="float32", run_training_check=kwargs.get("kernel_dtype") != "bfloat16")


@pytest.mark.parametrize("projection_dim", [None, 5])
def test_layer_contract_without_a_projection(projection_dim):
    out = run_layer_test(ProjectedLSTM, {"units": 5, "projection_dim": projection_dim, "jit_compile": False},
                         {"inputs": X, "lengths": LENGTHS}, expected_output_shape=((2, 4, 5), (2, 5), (2, 5)),
                         expected_num_trainable_weights=3, expected_output_dtype="float32")
    np.testing.assert_array_equal(out[0].numpy()[1, 2:], 0.0)  # past the second row's length


def test_layer_contract_with_distinct_rows_and_a_token_index():
    # The inputs are (1, n_distinct, features) rows, so they cannot be batched with the index for a fit step.
    rows = X[:1]
    index = np.array([[0, 3, 3, 1], [2, 2, 0, 1]], np.int32)
    run_layer_test(ProjectedLSTM, {"units": 5, "projection_dim": 2, "jit_compile": False},
                   {"inputs": rows, "lengths": LENGTHS, "token_index": index},
                   expected_output_shape=((2, 4, 2), (2, 5), (2, 2)), expected_num_trainable_weights=4,
                   expected_output_dtype="float32", run_training_check=False)


def test_layer_gradients_in_training_mode_equal_inference_mode():
    layer = ProjectedLSTM(8, 4, 3.0, 3.0, go_backwards=True)
    x = tf.random.stateless_normal([3, 5, 6], seed=[1, 2])
    lengths = tf.constant([5, 2, 4])
    layer(x, lengths)
    grads = []
    for training in (False, True):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out, c, h = layer(x, lengths, training=training)
            loss = tf.reduce_sum(out ** 2) + tf.reduce_sum(c) + tf.reduce_sum(h)
        grads.append(tape.gradient(loss, [x] + layer.trainable_weights))
    for a, b in zip(*grads):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-5)


def test_training_mode_takes_a_batch_without_rows():
    layer = ProjectedLSTM(8, 4, 3.0, 3.0)
    x = tf.zeros([0, 5, 6])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, c, h = layer(x, tf.zeros([0], tf.int32), training=True)
        loss = tf.reduce_sum(out) + tf.reduce_sum(c)
    assert (out.shape, c.shape, h.shape) == ((0, 5, 4), (0, 8), (0, 4))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    assert grads[0].shape == x.shape
    for weight, grad in zip(layer.trainable_weights, grads[1:]):
        np.testing.assert_array_equal(grad.numpy(), np.zeros(weight.shape))


@pytest.mark.parametrize("training, distinct", [(False, False), (True, False), (True, True)])
def test_no_time_steps_pass_the_states_through(training, distinct):
    layer = ProjectedLSTM(8, 4, 3.0, 3.0)
    c0 = tf.random.stateless_normal([3, 8], seed=[1, 2])
    h0 = tf.random.stateless_normal([3, 4], seed=[3, 4])
    inputs = tf.zeros([1, 2, 6]) if distinct else tf.zeros([3, 0, 6])
    token_index = tf.zeros([3, 0], tf.int32) if distinct else None
    with tf.GradientTape() as tape:
        tape.watch([c0, h0])
        out, c, h = layer(inputs, tf.zeros([3], tf.int32), initial_state=(c0, h0), training=training,
                          token_index=token_index)
        loss = tf.reduce_sum(c * c) + tf.reduce_sum(h)
    assert out.shape == (3, 0, 4)
    np.testing.assert_array_equal(c.numpy(), c0.numpy())
    np.testing.assert_array_equal(h.numpy(), h0.numpy())
    dc0, dh0 = tape.gradient(loss, [c0, h0])
    np.testing.assert_allclose(dc0.numpy(), 2 * c0.numpy())
    np.testing.assert_array_equal(dh0.numpy(), np.ones([3, 4]))


@pytest.mark.parametrize("go_backwards", [False, True])
def test_distinct_rows_with_an_index_equal_the_gathered_inputs(go_backwards):
    layer = ProjectedLSTM(8, 4, 3.0, 3.0, go_backwards=go_backwards)
    rows = tf.random.stateless_normal([1, 5, 6], seed=[3, 4])
    index = tf.constant([[0, 3, 3, 1, 4], [2, 2, 0, 0, 0], [4, 1, 0, 2, 3]])
    lengths = tf.constant([5, 2, 4])
    dense = layer(tf.gather(rows[0], index), lengths)
    distinct = layer(rows, lengths, token_index=index)
    for a, b in zip(dense, distinct):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6)
    assert np.abs(dense[0].numpy()).max() > 0


def test_xla_by_default_only_for_kernels_that_stay_in_cache():
    assert ProjectedLSTM(1024, 128).uses_xla        # small released size, 2 MiB kernel
    assert not ProjectedLSTM(4096, 512).uses_xla    # original size, 32 MiB kernel
    assert not ProjectedLSTM(8, 4, jit_compile=False).uses_xla


def test_inference_runs_the_xla_loop_only_where_gradients_may_flow_and_both_loops_agree():
    """Frozen layers (prediction) run the packed loop; a trainable one with a
    small kernel the XLA loop, whose hand-written gradient serves
    fine-tuning. Outputs and gradients are the same either way."""
    layer = ProjectedLSTM(8, 4, 3.0, 3.0)
    assert layer.inference_uses_xla
    assert not ProjectedLSTM(4096, 512).inference_uses_xla
    assert not ProjectedLSTM(8, 4, jit_compile=False).inference_uses_xla
    frozen = ProjectedLSTM(8, 4, 3.0, 3.0, trainable=False)
    assert not frozen.inference_uses_xla
    assert ProjectedLSTM(8, 4, jit_compile=True, trainable=False).inference_uses_xla
    inputs = tf.random.stateless_normal([3, 5, 6], seed=[5, 6])
    lengths = tf.constant([5, 2, 4])
    layer.build(inputs.shape)
    frozen.build(inputs.shape)
    frozen.set_weights(layer.get_weights())
    results = []
    for lstm in (layer, frozen):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs, c, h = lstm(inputs, lengths, training=False)
            loss = tf.reduce_sum(outputs ** 2) + tf.reduce_sum(c * h[:, :1])
        results.append([outputs, c, h, *tape.gradient(loss, [inputs, lstm.recurrent_kernel])])
    for xla, packed in zip(*results):
        np.testing.assert_allclose(packed.numpy(), xla.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(results[0][-1].numpy()).max() > 0


def test_lstm_input_half_uses_bfloat16_in_training_only():
    rng = np.random.default_rng(3)
    inputs = tf.constant(rng.normal(size=(4, 6, 12)), tf.float32)
    lengths = tf.constant([6, 3, 5, 1])
    layers = {dtype: ProjectedLSTM(16, 8, 3.0, 3.0, training_matmul_dtype=dtype) for dtype in ("float32", "bfloat16")}
    for layer in layers.values():
        layer.build((None, None, 12))
    layers["bfloat16"].set_weights(layers["float32"].get_weights())
    reference = [t.numpy() for t in layers["float32"](inputs, lengths, training=True)]
    inference = [t.numpy() for t in layers["bfloat16"](inputs, lengths, training=False)]
    trained = [t.numpy() for t in layers["bfloat16"](inputs, lengths, training=True)]
    for got_inference, got_trained, want in zip(inference, trained, reference):
        np.testing.assert_allclose(got_inference, want, atol=1e-6)
        np.testing.assert_allclose(got_trained, want, atol=0.02)
    assert not np.allclose(trained[0], reference[0], atol=1e-6)


def _relative_deviations(got, want):
    """Per row vector `|got - want| / |want|` (Euclidean) over the last axis."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.linalg.norm(got - want, axis=-1) / np.maximum(np.linalg.norm(want, axis=-1), 1e-12)


@pytest.mark.parametrize("go_backwards, distinct, jit_compile", [
    (False, False, None), (True, True, None), (True, False, True)])
def test_bfloat16_inference_stays_within_its_tolerance_of_float32(go_backwards, distinct, jit_compile):
    """`kernel_dtype="bfloat16"` against float32, same weights.

    Tolerance: each output vector and final state within
    `BFLOAT16_INFERENCE_TOLERANCE` (3%, relative, Euclidean) of float32's.
    bfloat16 keeps 8 significant bits, so a step rounds h, the kernels and
    each product to 2**-9 relative; with the layer's initial weights the
    gates' slopes and the forget gate damp a perturbation from step to
    step, and these tiny layers, whose short sums average the roundings
    least, deviate by up to 1.4%. The outputs must differ by more than
    float32 round-off, so bfloat16 was used.
    """
    rng = np.random.default_rng(7)
    lengths = tf.constant([7, 3, 0, 5, 7, 1])
    index = tf.constant(rng.integers(0, 9, size=(6, 7)), tf.int32)
    rows = tf.constant(rng.normal(size=(1, 9, 12)), tf.float32)
    inputs = rows if distinct else tf.gather(rows[0], index)
    state = [tf.constant(rng.normal(size=(6, 32)), tf.float32), tf.constant(rng.normal(size=(6, 8)), tf.float32)]
    layers = {dtype: ProjectedLSTM(32, 8, 3.0, 3.0, go_backwards=go_backwards, jit_compile=jit_compile,
                                   kernel_dtype=dtype)
              for dtype in ("float32", "bfloat16")}
    for layer in layers.values():
        layer.build((None, None, 12))
    layers["bfloat16"].set_weights(layers["float32"].get_weights())
    results = {dtype: [t.numpy() for t in layer(inputs, lengths, state, token_index=index if distinct else None)]
               for dtype, layer in layers.items()}
    mask = np.arange(7)[None, :] < lengths.numpy()[:, None]
    for got, want in zip(results["bfloat16"], results["float32"]):
        deviations = _relative_deviations(got[mask] if got.ndim == 3 else got, want[mask] if want.ndim == 3 else want)
        assert deviations.max() < BFLOAT16_INFERENCE_TOLERANCE
    assert _relative_deviations(results["bfloat16"][0][mask], results["float32"][0][mask]).max() > 1e-5
    np.testing.assert_array_equal(results["bfloat16"][0][~mask], 0.0)
    np.testing.assert_array_equal(results["bfloat16"][1][2], state[0].numpy()[2])  # the empty row's state


def test_bfloat16_inference_layer_keeps_its_kernels_in_bfloat16_and_refuses_training():
    layer = ProjectedLSTM(16, 8, 3.0, 3.0, kernel_dtype="bfloat16", name="lstm")
    layer.build((None, None, 12))
    assert [w.dtype for w in layer.weights] == ["bfloat16", "bfloat16", "float32", "bfloat16"]
    # Assigning float32 values rounds them once: there is no float32 copy to go stale.
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(8, 64)).astype(np.float32)
    layer.recurrent_kernel.assign(kernel)
    np.testing.assert_array_equal(layer.recurrent_kernel.numpy().astype(np.float32),
                                  tf.cast(tf.cast(kernel, tf.bfloat16), tf.float32).numpy())
    with pytest.raises(ValueError, match=r"ProjectedLSTM 'lstm' keeps its kernels in bfloat16 .* training=True"):
        layer(tf.zeros([2, 3, 12]), tf.constant([3, 1]), training=True)
    with pytest.raises(ValueError, match="kernel_dtype must be one of"):
        ProjectedLSTM(16, 8, kernel_dtype="float16")


def test_bfloat16_inference_follows_assigned_weights():
    # New weights, however they arrive, are what the next call uses: the
    # output equals a new layer's built with them.
    rng = np.random.default_rng(2)
    inputs, lengths = tf.constant(rng.normal(size=(3, 5, 12)), tf.float32), tf.constant([5, 2, 4])
    layer = ProjectedLSTM(16, 8, 3.0, 3.0, kernel_dtype="bfloat16")
    first = layer(inputs, lengths)[0].numpy()
    call = tf.function(lambda: layer(inputs, lengths)[0])  # a traced call reads the variables too
    np.testing.assert_array_equal(call().numpy(), first)
    weights = [rng.normal(size=w.shape, scale=0.5).astype(np.float32) for w in layer.weights]
    layer.set_weights(weights)
    fresh = ProjectedLSTM(16, 8, 3.0, 3.0, kernel_dtype="bfloat16")
    fresh.build((None, None, 12))
    fresh.set_weights(weights)
    want = fresh(inputs, lengths)[0].numpy()
    assert not np.allclose(want, first)
    np.testing.assert_array_equal(layer(inputs, lengths)[0].numpy(), want)
    np.testing.assert_array_equal(call().numpy(), want)


def test_recurrent_kernel_is_drawn_independently_of_the_input_kernel():
    # Equal input and output widths: a shared unseeded initializer would make W_h equal W_x.
    layer = ProjectedLSTM(16, projection_dim=8, jit_compile=False)
    layer.build((None, None, 8))
    w_x, w_h = layer.input_kernel.numpy(), layer.recurrent_kernel.numpy()
    limit = (6.0 / (8 + 8 + 4 * 16)) ** 0.5
    for kernel in (w_x, w_h):
        assert np.abs(kernel).max() <= limit and kernel.std() > 0.4 * limit
    correlation = np.corrcoef(w_x.ravel(), w_h.ravel())[0, 1]
    assert abs(correlation) * np.sqrt(w_x.size) < 5.0, correlation


def test_int8_layer_contract():
    # The bias is its only trainable weight; each kernel is int8 values and float32 scales.
    run_layer_test(ProjectedLSTM, {"units": 5, "projection_dim": 2, "kernel_dtype": "int8", "jit_compile": False},
                   {"inputs": X, "lengths": LENGTHS, "initial_state": [C0, H0]},
                   expected_output_shape=((2, 4, 2), (2, 5), (2, 2)), expected_num_trainable_weights=1,
                   expected_num_non_trainable_weights=6, expected_output_dtype="float32", run_training_check=False)


def _int8_and_float32_layers(**kwargs):
    """An int8 layer and a float32 one holding exactly the kernels the int8 one stands for."""
    rng = np.random.default_rng(8)
    layers = {dtype: ProjectedLSTM(32, 8, 3.0, 3.0, kernel_dtype=dtype, **kwargs) for dtype in ("float32", "int8")}
    for layer in layers.values():
        layer.build((None, None, 12))
        layer.trainable = False
    for name in ("input_kernel", "recurrent_kernel", "projection_kernel"):
        getattr(layers["int8"], name).assign(rng.normal(size=getattr(layers["float32"], name).shape) * 0.3)
        getattr(layers["float32"], name).assign(getattr(layers["int8"], name).numpy())
    layers["int8"].bias.assign(layers["float32"].bias.numpy() + 0.1)
    layers["float32"].bias.assign(layers["int8"].bias.numpy())
    return layers


@pytest.mark.parametrize("go_backwards, distinct, jit_compile, batch", [
    (False, False, None, 6), (True, True, None, 6), (True, False, None, 70), (False, False, True, 6)])
def test_int8_inference_equals_float32_over_its_dequantized_kernels(go_backwards, distinct, jit_compile, batch):
    # Activations, sums and states stay float32, on every path: bilm's
    # kernel (at most MAX_STREAMED_ROWS rows a step), the per-step choice
    # (70 rows), distinct rows, and the XLA loop (widened kernels).
    rng = np.random.default_rng(batch)
    lengths = tf.constant(rng.integers(0, 8, size=batch), tf.int32)
    index = tf.constant(rng.integers(0, 9, size=(batch, 7)), tf.int32)
    rows = tf.constant(rng.normal(size=(1, 9, 12)), tf.float32)
    inputs = rows if distinct else tf.gather(rows[0], index)
    state = [tf.constant(rng.normal(size=(batch, 32)), tf.float32), tf.zeros([batch, 8])]
    layers = _int8_and_float32_layers(go_backwards=go_backwards, jit_compile=jit_compile)
    results = {dtype: layer(inputs, lengths, state, token_index=index if distinct else None)
               for dtype, layer in layers.items()}
    for got, want in zip(results["int8"], results["float32"]):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=2e-6)


def test_int8_layer_quantizes_what_is_assigned_and_refuses_training():
    layer = ProjectedLSTM(16, 8, 3.0, 3.0, kernel_dtype="int8", name="lstm")
    layer.build((None, None, 12))
    assert {w.path.split("/")[-1]: w.dtype for w in layer.weights} == {
        "bias": "float32", "input_kernel": "int8", "input_kernel_scale": "float32", "recurrent_kernel": "int8",
        "recurrent_kernel_scale": "float32", "projection_kernel": "int8", "projection_kernel_scale": "float32"}
    kernel = np.random.default_rng(1).normal(size=(8, 64)).astype(np.float32)
    layer.recurrent_kernel.assign(kernel)
    step = np.abs(kernel).max(axis=0) / 127
    assert np.all(np.abs(layer.recurrent_kernel.numpy() - kernel) <= step * 0.5001)
    np.testing.assert_array_equal(layer.recurrent_kernel.values.numpy(),
                                  np.rint(kernel / layer.recurrent_kernel.scale.numpy()))
    with pytest.raises(ValueError, match=r"ProjectedLSTM 'lstm' keeps its kernels in int8 .* training=True"):
        layer(tf.zeros([2, 3, 12]), tf.constant([3, 1]), training=True)
    with pytest.raises(ValueError, match="kernel_dtype must be one of 'float32', 'bfloat16', 'int8'"):
        ProjectedLSTM(16, 8, kernel_dtype="int4")


@pytest.mark.parametrize("kernel_dtype", ["float32", "int8"])
def test_a_given_kernel_initializer_replaces_the_original_draws_and_is_in_the_config(kernel_dtype):
    # "zeros" for a layer whose weights are about to be loaded: nothing drawn.
    layer = ProjectedLSTM(16, 8, kernel_dtype=kernel_dtype, kernel_initializer="zeros")
    layer.build((None, None, 12))
    for kernel in (layer.input_kernel, layer.recurrent_kernel, layer.projection_kernel):
        assert not np.any(kernel.numpy())
    again = ProjectedLSTM.from_config(layer.get_config())
    again.build((None, None, 12))
    assert not np.any(again.recurrent_kernel.numpy())
    default = ProjectedLSTM(16, 8, kernel_dtype=kernel_dtype)
    default.build((None, None, 12))
    assert default.get_config()["kernel_initializer"] is None and np.mean(default.recurrent_kernel.numpy() != 0) > 0.9
