"""Deprecated: the array trainer's earlier folder, named for JAX though PyTorch trains with it too. Each module
`bilm.training.jax.<name>` is `bilm.training.arrays.<name>`, the same module object."""
