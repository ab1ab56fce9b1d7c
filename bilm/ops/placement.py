"""Where the work being traced will run, and so which kernels it may take.

bilm's own ops (`bilm.ops.native`: the product of few rows and the LSTM
recurrence built on it) have CPU kernels only, and no XLA kernel. A graph
that holds them but runs on a GPU makes TensorFlow place them on the host:
every call copies the kernels over (hundreds of MB at the original size)
and runs the LSTM steps on the CPU. An XLA-compiled function cannot hold
them at all. So one function, `native_kernels_allowed`, decides at trace
time for every caller (inference, the boundary-state measure, fine-tuning,
training, SavedModel export), from where the ops being made will run:

- inside `stock_kernels()` (a SavedModel that any TensorFlow must load): no;
- while a function compiled with XLA is traced (`tf.function(jit_compile=True)`,
  Keras's `compile(jit_compile=True)` or its "auto" on a GPU machine): no;
- on a device other than a CPU: no. The device is the innermost
  `tf.device` scope's, else TensorFlow's default: the first visible GPU (or
  other accelerator) where there is one, else the CPU.

`bfloat16_products_fast` decides the same way whether TensorFlow's own
bfloat16 matmul beats a float32 one with the kernel widened: on an
accelerator yes, on a CPU where it has bfloat16 instructions.
"""
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import control_flow_util

from bilm.utils.cpu_features import has_bfloat16_arithmetic
from bilm.utils.thread_flag import ThreadFlag

_STOCK_ONLY = ThreadFlag()


def stock_kernels():
    """Within it (this thread), functions traced use stock TensorFlow ops
    only, as a SavedModel that a TensorFlow-only client loads must."""
    return _STOCK_ONLY.on()


def compiling_with_xla():
    """Whether the function being traced now is compiled with XLA (itself
    or a function around it was given `jit_compile=True`). False eagerly."""
    if tf.executing_eagerly():
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph())


def device_type():
    """The type (`"CPU"`, `"GPU"`, `"TPU"`, ...) of the device that ops made
    now run on: the innermost `tf.device` scope's, else the first visible
    accelerator's, else `"CPU"`."""
    scoped = _scoped_device_type()
    if scoped:
        return scoped
    accelerators = [d for d in tf.config.list_logical_devices() if d.device_type != "CPU"]
    return accelerators[0].device_type if accelerators else "CPU"


def _scoped_device_type():
    """The device type that the innermost `tf.device` scope names, or "" for
    none. A function traced inside another is traced while the caller's
    scopes are open, so the graphs around it are asked too."""
    if tf.executing_eagerly():
        return _device_type_of(context.context().device_name)
    graph = tf_ops.get_default_graph()
    while graph is not None:
        for spec in graph._device_function_stack.peek_objs():  # noqa: SLF001 (innermost first; no public accessor)
            if spec.function is None:  # tf.device(None): no device from here outwards
                return ""
            # A device string's spec keeps it as `raw_string`; a device function has none.
            kind = _device_type_of(spec.raw_string)
            if kind:
                return kind
        graph = getattr(graph, "outer_graph", None)
    return ""


def _device_type_of(name):
    return (tf.DeviceSpec.from_string(name).device_type or "") if name else ""


def native_kernels_allowed():
    """Whether a function traced now may hold bilm's own CPU ops: not inside
    `stock_kernels()`, not under XLA, and placed on a CPU (module docstring)."""
    return not _STOCK_ONLY.is_on() and not compiling_with_xla() and device_type() == "CPU"


def bfloat16_products_fast():
    """Whether TensorFlow's bfloat16 matmul (bfloat16 operands, float32
    accumulation) is the faster product here: on an accelerator, or on a
    CPU with bfloat16 instructions (`has_bfloat16_arithmetic`); elsewhere a
    float32 product with the kernel widened is."""
    kind = device_type()
    return has_bfloat16_arithmetic() if kind == "CPU" else True
