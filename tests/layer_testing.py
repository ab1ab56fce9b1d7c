"""`run_layer_test`: one call that checks a Keras layer's whole contract.

Modelled on keras's `keras/src/testing/test_case.py::run_layer_test`: the
layer is called eagerly and on `keras.Input`s (shapes, dtypes, weight
counts, masking), its config goes through `get_config` / `from_config` and
keras serialization, and a trainable layer takes one training step inside a
tiny model. Keras's mixed-precision check is left out: bilm's layers compute
in float32 (bfloat16 is their own `kernel_dtype` / `training_matmul_dtype`,
tested in their modules).
"""
import keras
import numpy as np
from keras import tree


def run_layer_test(layer_cls, init_kwargs, input_data, expected_output_shape, expected_num_trainable_weights=0,
                   expected_num_non_trainable_weights=0, expected_output_dtype=None, supports_masking=False,
                   expected_mask_shape=None, expected_num_losses=None, call_kwargs=None, check_symbolic_dtype=True,
                   run_training_check=True, training_output=None, seed=0):
    """Checks `layer_cls(**init_kwargs)` called on `input_data`; returns the eager output.

    Args:
        layer_cls: the layer class.
        init_kwargs: its constructor arguments (tiny sizes).
        input_data: what the layer is called on: an array (or a list of
            arrays) passed as the first argument, or a dict of arrays (and
            lists of arrays) passed as keyword arguments, e.g.
            `{"inputs": x, "lengths": lengths, "initial_state": [c, h]}`.
        expected_output_shape: the output's shape, or a structure of shapes
            like the output's (`None` matches any size). Checked on the
            eager and on the symbolic output, which is called on
            `keras.Input`s of `input_data`'s full shapes.
        expected_num_trainable_weights, expected_num_non_trainable_weights:
            how many weights the built layer has.
        expected_output_dtype: the dtype of every output, or None.
        supports_masking: the layer's `supports_masking`.
        expected_mask_shape: the shape of the output's Keras mask (eager and
            symbolic), or None for no mask check.
        expected_num_losses: how many terms the eager call adds to
            `layer.losses` (regularizers), or None for no check.
        call_kwargs: non-tensor call arguments (e.g. `{"training": False}`).
        check_symbolic_dtype: whether the symbolic output's dtype must also
            be `expected_output_dtype`.
        run_training_check: for a layer with trainable weights, one
            `fit` step of `layer -> Dense(1)` (SGD, mean squared error, random
            targets) must change each of the layer's trainable weights.
        training_output: index of the output the Dense head reads when the
            layer has several (default: the output itself, or its first).
        seed: seeds the layers' initialisers and the random targets.

    Also checked: each constructor argument is in the config, and an
    attribute of the layer, with the value given (lists and tuples alike);
    `get_config` / `from_config` gives a layer with the same config which,
    given the original's weights, computes the same output;
    `keras.saving.serialize_keras_object` round trips the layer (it is
    registered); one eager call builds the layer.
    """
    call_kwargs = dict(call_kwargs or {})
    keras.utils.set_random_seed(seed)

    # Eager call.
    layer = layer_cls(**init_kwargs)
    assert layer.supports_masking == supports_masking, f"supports_masking is {layer.supports_masking}"
    output = _call(layer, input_data, call_kwargs)
    assert layer.built, f"{layer_cls.__name__} is not built after a call"
    _check_weight_counts(layer, expected_num_trainable_weights, expected_num_non_trainable_weights)
    _check_shapes(expected_output_shape, output, "eager")
    if expected_output_dtype is not None:
        _check_dtypes(expected_output_dtype, output, "eager")
    if expected_mask_shape is not None:
        _check_mask(expected_mask_shape, output, "eager")
    if expected_num_losses is not None:
        assert len(layer.losses) == expected_num_losses, f"{len(layer.losses)} losses, expected {expected_num_losses}"

    # Symbolic call on keras.Inputs.
    symbolic_layer = layer_cls(**init_kwargs)
    symbolic_inputs = tree.map_structure(_keras_input, input_data)
    symbolic_output = _call(symbolic_layer, symbolic_inputs, call_kwargs)
    _check_weight_counts(symbolic_layer, expected_num_trainable_weights, expected_num_non_trainable_weights)
    _check_shapes(expected_output_shape, symbolic_output, "symbolic")
    if expected_output_dtype is not None and check_symbolic_dtype:
        _check_dtypes(expected_output_dtype, symbolic_output, "symbolic")
    if expected_mask_shape is not None:
        _check_mask(expected_mask_shape, symbolic_output, "symbolic")

    # The constructor arguments are the config; then the round trip: same
    # config, and with the same weights the same output.
    config = layer.get_config()
    for key, value in init_kwargs.items():
        assert _as_lists(config[key]) == _as_lists(value), f"config[{key!r}] is {config[key]!r}, given {value!r}"
        assert _as_lists(getattr(layer, key)) == _as_lists(value), f"{key} is {getattr(layer, key)!r}, given {value!r}"
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config
    _call(clone, input_data, call_kwargs)
    clone.set_weights(layer.get_weights())
    for got, want in zip(tree.flatten(_call(clone, input_data, call_kwargs)), tree.flatten(output)):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want))
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is layer_cls and revived.get_config() == config

    if run_training_check and expected_num_trainable_weights:
        _check_training_step(layer_cls(**init_kwargs), input_data, call_kwargs, training_output, seed)
    return output


def _call(layer, inputs, call_kwargs):
    if isinstance(inputs, dict):
        return layer(**inputs, **call_kwargs)
    return layer(inputs, **call_kwargs)


def _as_lists(value):
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    return value


def _keras_input(array):
    array = np.asarray(array)
    dtype = "string" if array.dtype.kind in "OSU" else str(array.dtype)
    return keras.Input(batch_shape=array.shape, dtype=dtype)


def _is_shape(value):
    return isinstance(value, tuple) and all(d is None or isinstance(d, int) for d in value)


def _check_shapes(expected, output, mode):
    if _is_shape(expected):
        actual = tuple(output.shape)
        assert len(actual) == len(expected) and all(e is None or e == a for e, a in zip(expected, actual)), (
            f"{mode} output shape {actual}, expected {expected}")
        return
    assert isinstance(output, (list, tuple)) and len(output) == len(expected), (
        f"{mode} output {output!r} does not have the structure of {expected!r}")
    for shape, part in zip(expected, output):
        _check_shapes(shape, part, mode)


def _check_dtypes(expected, output, mode):
    dtypes = [keras.backend.standardize_dtype(x.dtype) for x in tree.flatten(output)]
    assert dtypes == [expected] * len(dtypes), f"{mode} output dtypes {dtypes}, expected {expected}"


def _check_mask(expected_shape, output, mode):
    mask = getattr(output, "_keras_mask", None)
    assert mask is not None, f"the {mode} output carries no Keras mask"
    assert tuple(mask.shape) == expected_shape, f"{mode} mask shape {tuple(mask.shape)}, expected {expected_shape}"


def _check_weight_counts(layer, n_trainable, n_non_trainable):
    assert len(layer.trainable_weights) == n_trainable, (
        f"{len(layer.trainable_weights)} trainable weights, expected {n_trainable}")
    assert len(layer.non_trainable_weights) == n_non_trainable, (
        f"{len(layer.non_trainable_weights)} non-trainable weights, expected {n_non_trainable}")


def _check_training_step(layer, input_data, call_kwargs, training_output, seed):
    flat_data = tree.flatten(input_data)
    flat_inputs = [_keras_input(x) for x in flat_data]
    outputs = _call(layer, tree.pack_sequence_as(input_data, flat_inputs), call_kwargs)
    if isinstance(outputs, (list, tuple)):
        outputs = outputs[training_output or 0]
    model = keras.Model(flat_inputs, keras.layers.Dense(1)(outputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
    targets = np.random.default_rng(seed).normal(size=model.output.shape).astype("float32")
    before = [w.numpy().copy() for w in layer.trainable_weights]
    model.fit(flat_data, targets, batch_size=len(targets), epochs=1, verbose=0)
    for weight, old in zip(layer.trainable_weights, before):
        assert not np.array_equal(weight.numpy(), old), f"one training step left {weight.path} unchanged"
