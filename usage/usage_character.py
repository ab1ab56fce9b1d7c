"""ELMo from character inputs: batch sentences, run the biLM, mix the layers.

Run: python usage/usage_character.py
"""
import _example_model as example

from bilm import Batcher, BidirectionalLanguageModel, weight_layers

paths = example.make_example()
batcher = Batcher(paths["vocab_file"], 50)
bilm = BidirectionalLanguageModel(paths["options_file"], paths["weight_file"], stateful=False)

# One biLM for both inputs; the same WeightLayers instance is shared so the
# question and the context get the same learned mix.
context_ops = bilm(batcher.batch_sentences(example.CONTEXT))
question_ops = bilm(batcher.batch_sentences(example.QUESTION))
elmo_context = weight_layers("input", context_ops, l2_coef=0.0)
elmo_question = weight_layers("input", question_ops, layer=elmo_context["layer"])

print("lm_embeddings (batch, n_layers + 1, time, 2P):", tuple(context_ops["lm_embeddings"].shape))
print("token_embeddings (batch, time + 2, P):", tuple(context_ops["token_embeddings"].shape))
print("ELMo context (batch, time, 2P):", tuple(elmo_context["weighted_op"].shape))
print("ELMo question (batch, time, 2P):", tuple(elmo_question["weighted_op"].shape))
print("shared mix weights:", elmo_context["layer"] is elmo_question["layer"])
