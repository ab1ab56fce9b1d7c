"""File formats bilm reads and writes: bilm-tf's HDF5 weights, embedding and sentence files, text, PyTorch
weight files, fingerprints, TensorBoard event files, and writing an output safely. Nothing here fetches or
converts a model (`bilm.io.sources`). Internal: the public names are `bilm.io`'s."""
