"""Drop-in replacements for other ELMo libraries' APIs, on bilm: code written for them runs after one changed
import, on every Keras backend (docs/migrating.md).

- `bilm.compat.simple_elmo`: simple_elmo's `ElmoModel` (`load`, `get_elmo_vectors`,
  `get_elmo_vector_average`).
- `bilm.compat.elmoformanylangs`: ELMoForManyLangs' `Embedder` (`sents2elmo`).
- `bilm.compat.allennlp`: AllenNLP's `Elmo` and `batch_to_ids` (on PyTorch a
  `torch.nn.Module` that trains in your own).
- `bilm.compat.tf_hub`: TF-Hub's ELMo module: `load(...).signatures`, TF1's
  `Module` and `KerasLayer` (TensorFlow).
"""
