"""bilm: ELMo bidirectional language models for Keras 3: TensorFlow, JAX and PyTorch.

The public surface is what this package and its subpackages (`bilm.text`,
`bilm.ops`, `bilm.layers`, `bilm.models`, `bilm.io`, `bilm.export`,
`bilm.training`) export, and the modules `bilm.options`, `bilm.presets` and
`bilm.errors`; every other module is internal and may change.
"""
from bilm.utils.start_up import start_up

start_up()  # TensorFlow, before any module of bilm imports it: as a command or as a library (bilm.utils.start_up)

# isort: split
from bilm.errors import UserError
from bilm.export import dump_bilm_embeddings, dump_token_embeddings, embed_file
from bilm.layers import WeightLayers, weight_layers
from bilm.models import BidirectionalLanguageModel, ELMoEmbedding, build_bilm
from bilm.options import BiLMOptions, load_options
from bilm.pretrained import ELMo, load
from bilm.text import Batcher, TokenBatcher, UnicodeCharsVocabulary, Vocabulary
from bilm.utils.lazy_names import lazy_names

# TensorFlow's alone, imported when first used: `import bilm` runs on every Keras backend. The public
# subpackages and modules of the docstring, where `import bilm` has not imported them, are imported when first
# read (`bilm.training`).
__getattr__, _ = lazy_names("bilm", {"export_saved_model": "export.saved_model"},
                            tensorflow_only={"export_saved_model"},
                            submodules={"errors", "export", "io", "layers", "models", "ops", "options", "presets",
                                        "text", "training"})

__all__ = [
    "Batcher",
    "BiLMOptions",
    "BidirectionalLanguageModel",
    "ELMo",
    "ELMoEmbedding",
    "TokenBatcher",
    "UnicodeCharsVocabulary",
    "UserError",
    "Vocabulary",
    "WeightLayers",
    "build_bilm",
    "dump_bilm_embeddings",
    "dump_token_embeddings",
    "embed_file",
    "export_saved_model",
    "load",
    "load_options",
    "weight_layers",
]
