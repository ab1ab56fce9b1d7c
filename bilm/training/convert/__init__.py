"""Conversions of trained weights: bilm-tf's TF1 checkpoints in, the prediction weight file out."""
