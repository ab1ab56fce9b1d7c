"""bilm's training step on JAX: the biLM trained as one compiled XLA program."""
