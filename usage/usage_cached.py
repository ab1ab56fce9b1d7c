"""ELMo from cached biLM layers: dump every sentence's layers to HDF5 once,
then mix them in a downstream model without running the biLM again.

Run: python usage/usage_cached.py
"""
import os

import _example_model as example
import h5py
import numpy as np

from bilm import WeightLayers, dump_bilm_embeddings

paths = example.make_example()
embedding_file = os.path.join(paths["directory"], "elmo_embeddings.hdf5")
dump_bilm_embeddings(paths["vocab_file"], paths["dataset_file"], paths["options_file"],
                     paths["weight_file"], embedding_file, verbose=0)

mix = WeightLayers(l2_coef=0.0, name="input_ELMo")
with h5py.File(embedding_file, "r") as f:
    for key in sorted(f, key=int):
        layers = f[key][...]                       # (n_layers + 1, n_tokens, 2P)
        elmo = mix(layers[np.newaxis])             # (1, n_tokens, 2P)
        print(f"sentence {key}: cached {layers.shape} -> ELMo {tuple(elmo.shape)}")
