"""The array trainer: the biLM's training step written once in `keras.ops` on a state of arrays, which JAX and
PyTorch run (each with its own gradient, rows and compilation, `bilm.backend.<name>.training_ops`)."""
