"""bilm's LSTM recurrence as an XLA custom call for JAX on a CPU: `xla_kernels.cc` (the loop of TensorFlow's
`BilmLstmRecurrence` op on XLA's buffers and XLA's threads), built against the installed jaxlib's FFI headers once
per machine (`bilm.ops.native.build`) and registered with JAX once per process as the CPU target
`bilm_lstm_recurrence`. Its caller: `bilm.backend.jax.lstm_native_steps`."""
import ctypes
import threading

from bilm.ops.native.build import BUILD_FLAGS, BuildError, compile_cached, source_path, warn_not_built

SOURCE = "xla_kernels.cc"
TARGET = "bilm_lstm_recurrence"

_LOADED = {}
_LOADING = threading.Lock()


def register():
    """Whether the custom call `TARGET` is registered for JAX's CPU (built and registered on the first call); False
    where it cannot be built or loaded (no compiler, no FFI headers in jaxlib, a failed build): a RuntimeWarning
    then says once what failed, and JAX's own steps run instead."""
    with _LOADING:
        if "registered" not in _LOADED:
            _LOADED["registered"] = _register()
        return _LOADED["registered"]


def _register():
    import jax
    import jaxlib

    try:
        include = jax.ffi.include_dir()
        library = ctypes.CDLL(compile_cached(source_path(SOURCE), [*BUILD_FLAGS, "-std=c++17", "-I", include,
                                                                   "-Wno-attributes", "-Wno-return-type"], [],
                                             identity=f"jaxlib {jaxlib.__version__}"))
    except (BuildError, OSError) as error:
        warn_not_built("LSTM recurrence for JAX", "JAX's own steps run instead, more slowly", error, stacklevel=5)
        return False
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.BilmLstmRecurrence), platform="cpu")
    _LOADED["library"] = library  # the handler's code stays loaded for the process's life
    return True
