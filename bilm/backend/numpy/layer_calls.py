"""The layers' calls of Keras's NumPy backend's own (`bilm.backend.fast_layer_call`): none; every layer runs its
portable `keras.ops` code."""
FAST_CALLS = {}
