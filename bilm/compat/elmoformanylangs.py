"""ELMoForManyLangs' `Embedder`, on bilm: code written for it runs after one changed import,
`from bilm.compat.elmoformanylangs import Embedder`, on every Keras backend, for its model folders and archives
(`bilm.load` converts them once into its cache).

    embedder = Embedder("zhs.model")                       # batch_size=64
    vectors = embedder.sents2elmo([["今天", "天气", "好"]])   # [(3, 1024)]: the mean of the three layers

As ELMoForManyLangs computes them, `sents2elmo` returns one float32 array
per sentence, in input order: `output_layer=-1` the mean of the three
layers `(n_tokens, 2P)`, `-2` all of them `(3, n_tokens, 2P)`, `0` the word
encoder's `[x, x]`, `1` and `2` the LSTM layers. Tokens longer than the
model's characters per token are cut as there.

Deliberate differences: every sentence starts from zero LSTM states (there
the biLM carries each batch row's states into the next batch, in a
shuffled order, so only a sentence embedded on its own agrees); a sentence
given as one string is split on whitespace (ELMoForManyLangs would take
each character as a word); an `output_layer` it does not know is one clear
error (there: an `IndexError` or a silent layer), and no CUDA flag or
`torch.cuda.set_device` is needed: the Keras backend runs where it runs.
"""
from bilm.errors import UserError
from bilm.pretrained import load


class Embedder:
    """ELMoForManyLangs' `Embedder(model_dir, batch_size=64)`.

    Attributes:
        model_dir: the model folder or archive given.
        batch_size: sentences per model call.
        elmo: the `bilm.ELMo` it runs (its `start` zeros, as ELMoForManyLangs').
    """

    def __init__(self, model_dir, batch_size=64):
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.elmo = load(model_dir, start="zeros")

    def sents2elmo(self, sents, output_layer=-1):
        """A list of float32 arrays, one per sentence of `sents` (lists of words), in input order: `output_layer`
        -1 the mean of the layers `(n_tokens, 2P)`, -2 every layer `(n_layers + 1, n_tokens, 2P)`, 0 to
        `n_layers` that layer `(n_tokens, 2P)`."""
        n_layers = self.elmo.n_layers
        if isinstance(output_layer, bool) or output_layer not in (-2, -1, *range(n_layers + 1)):
            raise UserError(f"output_layer must be -1 (the mean of the layers), -2 (all of them) or a layer 0-"
                            f"{n_layers}. Received: output_layer={output_layer!r}")
        layers = {-1: "average", -2: "all"}.get(output_layer, output_layer)
        return self.elmo.embed(sents, layers, start="zeros", batch_size=self.batch_size, verbose=0)
