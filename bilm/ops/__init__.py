"""The fast kernels behind the layers, each a plain function of tensors."""
