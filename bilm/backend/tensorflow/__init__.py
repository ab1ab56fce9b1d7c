"""What bilm does its own way on TensorFlow (`bilm.backend`): devices, numerics and the inference call."""
