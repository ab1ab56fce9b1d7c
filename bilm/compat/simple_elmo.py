"""simple_elmo's `ElmoModel` (version 0.9), on bilm: code written for it runs after one changed import,
`from bilm.compat.simple_elmo import ElmoModel`, on every Keras backend.

    model = ElmoModel()
    model.load("209.zip")                                  # a directory or an NLPL zip; max_batch_size=32
    vectors = model.get_elmo_vectors([["The", "cat"], ["Hi"]])     # (2, 2, 2P), float64
    averages = model.get_elmo_vector_average([["The", "cat"]])     # (1, 2P), each of unit length

As simple_elmo computes them:
- The biLM is stateful, as bilm-tf's: each call starts its LSTM states at
  zeros, runs the first chunk of `max_batch_size` sentences once without
  keeping its output (`warmup=True`), then the chunks in order, each
  sentence row carrying its state from the chunk before.
- `layers="average"`: the scalar mix at its start (each layer weighted
  1/(L+1), gamma 1); `"top"`: the top layer; `"all"`: every layer,
  `(n, L+1, time, 2P)`.
- `get_elmo_vectors` pads each sentence with zeros to the longest one;
  `get_elmo_vector_average` sums a sentence's vectors and divides by their
  norm (an empty sentence gives NaN, as there).

Deliberate differences:
- `layers="all"` in `get_elmo_vector_average` gives each layer's sum
  divided by the norm of all of them, `(n, L+1, 2P)`; simple_elmo reshapes
  `(L+1, time)` as `(time, L+1)` there, which mixes the layers.
- A zip is extracted once into bilm's cache (`bilm.load`'s), not read in
  place; `limit` (how many vocabulary words simple_elmo caches as character
  ids) changes nothing here; no `logging.basicConfig` is called.
- A missing path is `FileNotFoundError`, not `SystemExit`; `full=True` (the
  language model's softmax, for `get_elmo_substitutes`) and `session=` (a
  TensorFlow 1 session) are one clear error each.
"""
import logging

import numpy as np
from keras import ops

from bilm.errors import UserError
from bilm.io.sources.model_files import locate_model
from bilm.models import BidirectionalLanguageModel
from bilm.models.text_inputs import batcher_for

LAYERS = ("average", "top", "all")
logger = logging.getLogger(__name__)


class ElmoModel:
    """simple_elmo's `ElmoModel`: `load` a model, then `get_elmo_vectors` and `get_elmo_vector_average`.

    Attributes (after `load`):
        batcher: the model's `Batcher` (text to character ids).
        batch_size: sentences per chunk (`max_batch_size`).
        max_chars: characters per token.
        vector_size: `2 * projection_dim`.
        n_layers: the biLM's layers plus the token layer.
    """

    def __init__(self):
        self.batcher = None
        self.batch_size = None
        self.max_chars = None
        self.vector_size = None
        self.n_layers = None
        self.language_model = None

    def load(self, directory, max_batch_size=32, limit=100, full=False):
        """Loads the model at `directory`: a folder with `options.json` and an HDF5 weight file, an NLPL zip, or
        anything else `bilm.load` opens. Returns `"The model is now loaded."`."""
        if full:
            raise UserError("ElmoModel.load(full=True) loads a training checkpoint's softmax for "
                            "get_elmo_substitutes, which bilm.compat.simple_elmo does not provide; load the model's "
                            "weights without full=True for its vectors.")
        files = locate_model(directory)
        self.language_model = BidirectionalLanguageModel(files.options_file, files.weight_file, stateful=True,
                                                         max_batch_size=max_batch_size)
        options = self.language_model.options
        self.batcher = batcher_for(options, files.vocab_file)
        self.batch_size = max_batch_size
        self.max_chars = options.char_cnn.max_characters_per_token
        self.vector_size = 2 * options.projection_dim
        self.n_layers = options.n_layers + 1
        logger.info("Loaded %s (%s).", files.weight_file, files.options_file)
        return "The model is now loaded."

    def get_elmo_vectors(self, texts, warmup=True, layers="average", session=None):
        """`(len(texts), longest sentence, vector_size)` float64 vectors of each token of `texts` (lists of
        words), zeros past each sentence's end; `layers="all"`: `(len(texts), n_layers, longest, vector_size)`."""
        self._check(texts, layers, session)
        longest = max(len(text) for text in texts)
        shape = (len(texts), self.n_layers, longest, self.vector_size) if layers == "all" else (
            len(texts), longest, self.vector_size)
        vectors = np.zeros(shape)
        for first, chunk_vectors in self._chunks(texts, warmup, layers):
            rows = slice(first, first + len(chunk_vectors))
            if layers == "all":
                vectors[rows, :, :chunk_vectors.shape[2]] = chunk_vectors
            else:
                vectors[rows, :chunk_vectors.shape[1]] = chunk_vectors
        return vectors

    def get_elmo_vector_average(self, texts, warmup=True, layers="average", session=None):
        """`(len(texts), vector_size)` float64: each sentence's token vectors summed and divided by their
        norm; `layers="all"`: `(len(texts), n_layers, vector_size)`, each layer's sum over the norm of all."""
        self._check(texts, layers, session)
        averages = np.zeros((len(texts), self.n_layers, self.vector_size) if layers == "all" else
                            (len(texts), self.vector_size))
        for first, chunk_vectors in self._chunks(texts, warmup, layers):
            time_axis = 2 if layers == "all" else 1
            sums = chunk_vectors.astype(np.float64).sum(axis=time_axis) / chunk_vectors.shape[time_axis]
            for row, total in enumerate(sums):
                with np.errstate(invalid="ignore", divide="ignore"):  # an empty sentence: NaN, as in simple_elmo
                    averages[first + row] = total / np.linalg.norm(total)
        return averages

    def get_elmo_substitutes(self, *args, **kwargs):
        """Not provided: it needs the language model's softmax (`load(full=True)` in simple_elmo)."""
        raise UserError("get_elmo_substitutes needs the language model's softmax (simple_elmo's load(full=True)), "
                        "which bilm.compat.simple_elmo does not provide.")

    # === The chunks ===

    def _chunks(self, texts, warmup, layers):
        """`(first row, float32 vectors of the chunk)` for each chunk of `batch_size` texts, in order, from zero
        states (after the first chunk once, with `warmup`)."""
        model = self.language_model
        model.reset_states()
        chunks = [texts[i:i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        if warmup:
            model(self.batcher.batch_sentences(chunks[0]))
        for index, chunk in enumerate(chunks):
            lm_embeddings = ops.convert_to_numpy(model(self.batcher.batch_sentences(chunk))["lm_embeddings"])
            yield index * self.batch_size, _select(lm_embeddings, layers)

    def _check(self, texts, layers, session):
        if self.language_model is None:
            raise UserError("ElmoModel: call load(path) before computing vectors.")
        if session is not None:
            raise UserError("session= is a TensorFlow 1 session, which bilm does not use; leave it out.")
        if layers not in LAYERS:
            raise UserError(f"layers must be one of {', '.join(map(repr, LAYERS))}. Received: layers={layers!r}")
        if not len(texts) or isinstance(texts, str) or any(isinstance(text, str) for text in texts):
            raise UserError("texts must be a non-empty list of sentences, each a list of words (e.g. [['The', "
                            "'cat'], ['Hi']]); split each sentence into words first.")


def _select(lm_embeddings, layers):
    """The vectors `layers` asks for, of `lm_embeddings` `(batch, L + 1, time, 2P)` float32."""
    if layers == "all":
        return lm_embeddings
    if layers == "top":
        return lm_embeddings[:, -1]
    # The scalar mix at its start (bilm.layers.WeightLayers): softmax(0 + 1/(L+1)) weights, gamma 1.
    n_layers = lm_embeddings.shape[1]
    logits = np.full(n_layers, 1.0 / n_layers, np.float32)
    weights = np.exp(logits - logits.max())
    weights = (weights / weights.sum()).astype(np.float32)
    return np.einsum("l,bltd->btd", weights, lm_embeddings).astype(np.float32)
