"""The control flow that Keras's backends shape each their own way: TensorFlow's `keras.ops.scan` wants every
output shaped as the carry (`bilm.ops.lstm_scan.carry_shaped_scan`), which the portable LSTM recurrence uses
by default."""
from bilm.ops.lstm_scan import carry_shaped_scan as scan
from bilm.ops.lstm_scan import lstm_steps

__all__ = ["lstm_steps", "scan"]
