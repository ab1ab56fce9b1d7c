"""The control flow that Keras's backends shape each their own way: TensorFlow's `keras.ops.scan` wants every
output shaped as the carry (`bilm.ops.lstm_scan.carry_shaped_scan`)."""
from bilm.ops.lstm_scan import carry_shaped_scan as scan

__all__ = ["scan"]
