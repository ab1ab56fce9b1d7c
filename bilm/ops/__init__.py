"""The fast kernels behind the layers, each a plain function of tensors.

The names below are the public surface of `bilm.ops`; its modules are
internal and may change.
"""
from bilm.ops.char_convolutions import max_pooled_char_convolutions
from bilm.ops.lstm_bptt import lstm_layer_bptt, lstm_recurrence_bptt
from bilm.ops.lstm_recurrence import lstm_recurrence_packed, lstm_recurrence_xla, packed_steps
from bilm.ops.matmul_dtype import (
    BFLOAT16_INFERENCE_TOLERANCE,
    INT8_INFERENCE_TOLERANCE,
    KERNEL_DTYPES,
    MATMUL_DTYPES,
    kernel_matmul,
    matmul,
)
from bilm.ops.sampled_softmax import full_softmax_loss, log_uniform_candidates, sampled_softmax_loss
from bilm.ops.scaled_kernel import ScaledKernel, dequantize, quantize_columns

__all__ = [
    "BFLOAT16_INFERENCE_TOLERANCE",
    "INT8_INFERENCE_TOLERANCE",
    "KERNEL_DTYPES",
    "MATMUL_DTYPES",
    "ScaledKernel",
    "dequantize",
    "full_softmax_loss",
    "kernel_matmul",
    "log_uniform_candidates",
    "lstm_layer_bptt",
    "lstm_recurrence_bptt",
    "lstm_recurrence_packed",
    "lstm_recurrence_xla",
    "matmul",
    "max_pooled_char_convolutions",
    "packed_steps",
    "quantize_columns",
    "sampled_softmax_loss",
]
