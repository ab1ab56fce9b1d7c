"""The kernels behind the layers, each a plain function of tensors.

The portable ones (`lstm_scan`, `char_convolutions_portable`,
`kernel_dtypes`) are `keras.ops` and run on every backend; the others are
TensorFlow's fast paths and training ops, imported only when a name of
theirs is used (so that `bilm.ops` imports without TensorFlow).

The names below are the public surface of `bilm.ops`; its modules are
internal and may change.
"""
from bilm.utils.lazy_names import lazy_names

_MODULES = {
    "max_pooled_char_convolutions": "char_convolutions",
    "portable_char_convolutions": "char_convolutions_portable",
    "lstm_layer_bptt": "lstm_bptt",
    "lstm_recurrence_bptt": "lstm_bptt",
    "lstm_recurrence_packed": "lstm_recurrence",
    "lstm_recurrence_xla": "lstm_recurrence",
    "packed_steps": "lstm_recurrence",
    "lstm_scan": "lstm_scan",
    "BFLOAT16_INFERENCE_TOLERANCE": "kernel_dtypes",
    "INT8_INFERENCE_TOLERANCE": "kernel_dtypes",
    "KERNEL_DTYPES": "kernel_dtypes",
    "MATMUL_DTYPES": "kernel_dtypes",
    "kernel_matmul": "matmul_dtype",
    "matmul": "matmul_dtype",
    "full_softmax_loss": "sampled_softmax",
    "log_uniform_candidates": "sampled_softmax",
    "sampled_softmax_loss": "sampled_softmax",
    "ScaledKernel": "scaled_kernel",
    "dequantize": "scaled_kernel",
    "quantize_columns": "scaled_kernel",
}

__all__ = sorted(_MODULES)

__getattr__, __dir__ = lazy_names(__name__, _MODULES)
