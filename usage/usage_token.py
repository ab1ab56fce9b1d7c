"""ELMo from token inputs: precompute the char-CNN token embeddings once, then
run the biLM on token ids (faster for a fixed vocabulary, same numbers).

Run: python usage/usage_token.py
"""
import os

import _example_model as example
import numpy as np

from bilm import BidirectionalLanguageModel, TokenBatcher, dump_token_embeddings, weight_layers

paths = example.make_example()
token_embedding_file = os.path.join(paths["directory"], "token_embeddings.hdf5")
dump_token_embeddings(paths["vocab_file"], paths["options_file"], paths["weight_file"],
                      token_embedding_file, verbose=0)

batcher = TokenBatcher(paths["vocab_file"])
bilm = BidirectionalLanguageModel(paths["options_file"], paths["weight_file"],
                                  use_character_inputs=False,
                                  embedding_weight_file=token_embedding_file, stateful=False)
context_ops = bilm(batcher.batch_sentences(example.CONTEXT))
elmo_context = weight_layers("input", context_ops, l2_coef=0.0)

print("token ids (batch, time + 2):", batcher.batch_sentences(example.CONTEXT).shape)
print("lm_embeddings (batch, n_layers + 1, time, 2P):", tuple(context_ops["lm_embeddings"].shape))
print("ELMo context (batch, time, 2P):", tuple(elmo_context["weighted_op"].shape))
print("finite:", bool(np.isfinite(elmo_context["weighted_op"].numpy()).all()))
