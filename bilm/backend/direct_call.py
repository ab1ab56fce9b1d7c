"""A functional network's call with each layer's own `call` run directly: the outputs of
`network(inputs, training=...)` (or of its `stateless_call`) without the work Keras wraps around every layer's
call (checking and converting its inputs, masks, autocasting, the call context). On an eager backend (PyTorch,
Keras's NumPy backend) that work is a large share of a short call (docs/performance.md); under a compiler
(JAX) it is tracing time.

The direct path is taken where it gives what Keras's call gives: a functional network whose layers are built,
compute in float32 with no quantization or rematerialization, and are not networks themselves, called with a
dict holding every input it names (tensors or arrays, not symbolic ones, with no Keras masks). Every other
network and call is Keras's own; `direct_path(network)` says which a network gets.
"""
import inspect
import weakref

import keras

__all__ = ["direct_call", "direct_path", "stateless_direct_call"]

_TAKES_TRAINING = weakref.WeakKeyDictionary()  # {layer: whether its `call` takes `training`}


def direct_path(network):
    """Whether calls of `network` run layer by layer (`direct_call`), not through Keras's call: asked at every
    call, so that a network changed since (a layer quantized, another dtype policy) goes through Keras."""
    if not isinstance(network, keras.Model) or not hasattr(network, "_run_through_graph") or not network.built:
        return False
    structure = getattr(network, "_inputs_struct", None)
    if not isinstance(structure, dict) or sorted(structure) != [tensor.name for tensor in network.inputs]:
        return False  # the graph's inputs are not a dict in the order of their names
    for layer in network.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        policy = layer.dtype_policy
        if (isinstance(layer, keras.Model) or not layer.built or policy.name != "float32"
                or policy.quantization_mode is not None or getattr(layer, "_remat_mode", None) is not None):
            return False
    return True


def direct_call(network, inputs, training=False):
    """`network(inputs, training=training)` layer by layer, where `direct_path(network)`; `inputs` a dict of
    tensors (or arrays) by the network's input names. Returns the network's outputs, as its call does."""
    flat = _flat_inputs(network, inputs)
    return network(inputs, training=training) if flat is None else _run_layers(network, flat, training)


def stateless_direct_call(network, trainable, non_trainable, inputs, training=False, calls=None):
    """`network.stateless_call(trainable, non_trainable, inputs, training=training)[0]`: the outputs with the
    variables' values taken from `trainable` and `non_trainable` (lists in the order of the network's
    variables), layer by layer where `direct_path(network)`. The non-trainable variables' new values are not
    returned: bilm's networks change none in a call.

    `calls` (`{layer: function}`, direct path only) replaces those layers' calls: each `function` takes the
    layer's inputs and returns what its call would (a training step reads a table's rows through it)."""
    flat = _flat_inputs(network, inputs)
    if calls and flat is None:
        raise ValueError(f"{network.name} runs through Keras's call here, which cannot replace its layers' calls.")
    if flat is None or (len(trainable), len(non_trainable)) != (len(network.trainable_variables),
                                                                len(network.non_trainable_variables)):
        return network.stateless_call(trainable, non_trainable, inputs, training=training)[0]  # or its error
    mapping = [*zip(network.trainable_variables, trainable), *zip(network.non_trainable_variables, non_trainable)]
    with keras.StatelessScope(state_mapping=mapping):
        return _run_layers(network, flat, training, calls or {})


def _run_layers(network, flat, training, calls=None):
    """The network's graph over `flat` (its inputs in order), each layer's `call` run directly (or `calls`'
    function for it), with `training` where it takes one."""
    def operation(layer):
        if calls and layer in calls:
            return calls[layer]
        if layer not in _TAKES_TRAINING:
            _TAKES_TRAINING[layer] = "training" in inspect.signature(layer.call).parameters
        if _TAKES_TRAINING[layer]:
            return lambda *args, **kwargs: layer.call(*args, **kwargs, training=training)
        return layer.call

    return network._run_through_graph(flat, operation_fn=operation)


def _flat_inputs(network, inputs):
    """`inputs` as the flat list of tensors the network's graph takes, or None: the call goes through Keras."""
    if not isinstance(inputs, dict) or not direct_path(network):
        return None
    names = [tensor.name for tensor in network.inputs]
    if any(name not in inputs or keras.backend.is_keras_tensor(inputs[name]) for name in names):
        return None  # an input missing, or a symbolic call (Keras computes the output spec)
    flat = [keras.ops.convert_to_tensor(inputs[name]) for name in names]
    if any(getattr(tensor, "_keras_mask", None) is not None for tensor in flat):
        return None
    return flat
