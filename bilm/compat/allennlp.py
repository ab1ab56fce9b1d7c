"""AllenNLP's `Elmo` and `batch_to_ids` (`allennlp.modules.elmo`, version 2.10), on bilm: code written for them
runs after one changed import, `from bilm.compat.allennlp import Elmo, batch_to_ids`.

    elmo = Elmo(options_file, weight_file, num_output_representations=2, dropout=0)
    character_ids = batch_to_ids([["First", "sentence", "."], ["Another", "."]])   # (2, 3, 50)
    output = elmo(character_ids)
    output["elmo_representations"]    # 2 x (2, 3, 2P)
    output["mask"]                    # (2, 3) bool

`Elmo` is a Keras layer: on PyTorch (`KERAS_BACKEND=torch`) a `torch.nn.Module`, whose scalar mixes (and, with
`requires_grad=True`, the biLM's weights) are its `parameters()`, trained by a torch optimizer inside your own
module; `train()` and `eval()` switch its dropout, as AllenNLP's. On TensorFlow and JAX it is the same layer in a
Keras model. As AllenNLP computes them:
- `batch_to_ids` gives each token's 50 character ids (its UTF-8 bytes
  between begin- and end-of-word marks, shifted by one, 0 for padding), the
  rows of a shorter sentence zero past its end; `<S>` and `</S>` are the
  sentence boundaries' ids.
- The biLM reads each sentence between `<S>` and `</S>` (added here); layer
  0 is the token encoding `[x, x]`, then each LSTM layer's
  `[forward, backward]`, all zero at padding.
- Each of the `num_output_representations` scalar mixes is
  `gamma * sum(softmax(s)_k * layer_k)`, `s` starting at zeros (or
  `scalar_mix_parameters`, then frozen) and `gamma` at 1; with
  `do_layer_norm` each layer is first normalised by the mean and variance of
  all its unmasked values in the batch, boundaries included.
- The boundaries are then removed (unless `keep_sentence_boundaries`) and
  `dropout` (0.5 by default) applied to each representation in training.

Deliberate differences:
- Every sentence starts from zero LSTM states, so its vectors do not depend
  on the batches before it. AllenNLP's biLM carries each batch row's state
  into the next batch, so only its first batch agrees with this one.
- `vocab_to_cache` words are looked up by index (`word_inputs`, 0 for
  padding) and encoded with the others, with the same vectors; `module=`
  (a biLM of your own) is one clear error.
"""
import warnings

import keras
import numpy as np
from keras import ops

from bilm.errors import UserError
from bilm.models.functional_bilm import state_keys
from bilm.models.network_dtype import FLOAT32
from bilm.models.prediction_network import load_prediction_bilm
from bilm.options import load_options
from bilm.text.batching import Batcher
from bilm.text.vocabulary import BOS_CHAR, EOS_CHAR, boundary_char_ids

# AllenNLP's `ELMoCharacterMapper.max_word_length`.
MAX_WORD_LENGTH = 50


def batch_to_ids(batch):
    """`(len(batch), longest sentence, 50)` int64 character ids of tokenized sentences (lists of strings), as
    AllenNLP's `batch_to_ids` gives them, as a tensor of Keras's backend (a `torch.LongTensor` on PyTorch)."""
    sentences = [list(sentence) for sentence in batch]
    ids = Batcher(None, MAX_WORD_LENGTH).batch_sentences(sentences)[:, 1:-1].astype(np.int64)
    for row, sentence in enumerate(sentences):
        ids[row, len(sentence):] = 0  # the </S> row that Batcher writes after the sentence
    return ops.convert_to_tensor(ids)


@keras.saving.register_keras_serializable(package="bilm.compat")
class ScalarMix(keras.layers.Layer):
    """AllenNLP's `ScalarMix`: `gamma * sum(softmax(s)_k * tensor_k)` over `mixture_size` tensors.

    Args:
        mixture_size: how many tensors are mixed.
        do_layer_norm: normalise each tensor first by the mean and variance
            of its values where `mask` is true (over the whole batch).
        initial_scalar_parameters: the `s` to start from (None: zeros).
        trainable: train `s` and `gamma`.

    Call arguments:
        tensors: a list of `mixture_size` tensors `(..., dim)`, one shape.
        mask: bool `(...)`, needed with `do_layer_norm`.
    """

    def __init__(self, mixture_size, do_layer_norm=False, initial_scalar_parameters=None, trainable=True, **kwargs):
        kwargs["dtype"] = FLOAT32
        super().__init__(trainable=trainable, **kwargs)
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        if len(initial_scalar_parameters) != mixture_size:
            raise UserError(f"initial_scalar_parameters has {len(initial_scalar_parameters)} values "
                            f"({initial_scalar_parameters}), and the mix has {mixture_size} tensors.")
        self.mixture_size, self.do_layer_norm = mixture_size, do_layer_norm
        self.supports_masking = True  # the mask is an argument of its own
        self.scalar_parameters = self.add_weight(
            name="scalar_parameters", shape=(mixture_size,),
            initializer=keras.initializers.Constant(np.asarray(initial_scalar_parameters, np.float32)))
        self.gamma = self.add_weight(name="gamma", shape=(1,), initializer="ones")
        self.initial_scalar_parameters = [float(value) for value in initial_scalar_parameters]

    def compute_mask(self, tensors, mask=None):
        return None

    def call(self, tensors, mask=None):
        if len(tensors) != self.mixture_size:
            raise UserError(f"{len(tensors)} tensors were given to a scalar mix of {self.mixture_size}.")
        weights = ops.softmax(self.scalar_parameters)
        if self.do_layer_norm:
            if mask is None:
                raise UserError("A scalar mix with do_layer_norm=True needs the mask.")
            broadcast_mask = ops.expand_dims(ops.cast(mask, "float32"), -1)
            count = ops.sum(broadcast_mask) * ops.shape(tensors[0])[-1]
            tensors = [_layer_norm(tensor, broadcast_mask, count) for tensor in tensors]
        return self.gamma * sum(weights[k] * tensor for k, tensor in enumerate(tensors))

    def get_config(self):
        return {**super().get_config(), "mixture_size": self.mixture_size, "do_layer_norm": self.do_layer_norm,
                "initial_scalar_parameters": self.initial_scalar_parameters}


def _layer_norm(tensor, broadcast_mask, count):
    """AllenNLP's masked layer norm: the mean and variance of all unmasked values (1e-13 against zero)."""
    masked = tensor * broadcast_mask
    mean = ops.sum(masked) / count
    variance = ops.sum(((masked - mean) * broadcast_mask) ** 2) / count
    return (tensor - mean) / ops.sqrt(variance + 1e-13)


class Elmo(keras.layers.Layer):
    """AllenNLP's `Elmo`: `num_output_representations` scalar mixes of a pretrained biLM's layers.

    Args:
        options_file, weight_file: the biLM (an `options.json` with a
            `char_cnn` section, and its HDF5 weights).
        num_output_representations: how many mixes (each with its own weights).
        requires_grad: train the biLM's weights too (fine-tuning).
        do_layer_norm: the mixes normalise each layer first (`ScalarMix`).
        dropout: the rate of dropout on each representation in training.
        vocab_to_cache: words that `word_inputs` index (index 0: padding).
        keep_sentence_boundaries: keep `<S>` and `</S>`: `timesteps + 2`.
        scalar_mix_parameters: the mixes' fixed `s` (pre-softmax), not trained.
        module: AllenNLP's own biLM module; not taken (one `UserError`).

    Call arguments:
        inputs: int `(batch, timesteps, 50)` character ids (`batch_to_ids`),
            or `(..., timesteps, 50)`.
        word_inputs: int `(batch, timesteps)` indices into `vocab_to_cache`.
        training: dropout on or off; None: the module's mode on PyTorch
            (`train()`/`eval()`), else off.

    Returns:
        dict: `"elmo_representations"`, a list of `num_output_representations`
        float32 `(batch, timesteps, 2P)` (the inputs' leading axes); `"mask"`,
        bool `(batch, timesteps)`.
    """

    def __init__(self, options_file, weight_file, num_output_representations, requires_grad=False,
                 do_layer_norm=False, dropout=0.5, vocab_to_cache=None, keep_sentence_boundaries=False,
                 scalar_mix_parameters=None, module=None, **kwargs):
        kwargs["dtype"] = FLOAT32
        super().__init__(**kwargs)
        if module is not None:
            raise UserError("Elmo(module=...) runs a biLM module of AllenNLP's own; bilm runs the biLM of "
                            "options_file and weight_file: pass those instead.")
        if not 0.0 <= dropout < 1.0:
            raise UserError(f"dropout must be in [0, 1). Received: dropout={dropout}")
        options = load_options(options_file)
        if options.char_cnn is None:
            raise UserError(f"{options.source}: Elmo reads character models (options with a 'char_cnn' section).")
        self.options = options.for_prediction(True)
        self.network = load_prediction_bilm(self.options, weight_file)
        self.network.trainable = requires_grad
        self.keep_sentence_boundaries = keep_sentence_boundaries
        self.scalar_mixes = [ScalarMix(self.options.n_layers + 1, do_layer_norm=do_layer_norm,
                                       initial_scalar_parameters=scalar_mix_parameters,
                                       trainable=scalar_mix_parameters is None, name=f"scalar_mix_{k}")
                             for k in range(num_output_representations)]
        self.dropout = dropout
        # Named, so that every Elmo's state_dict has the same keys (Keras numbers unnamed generators).
        self.dropout_seed = keras.random.SeedGenerator(name="elmo_dropout_seed") if dropout else None
        width = self.options.token_id_width
        self._boundaries = np.stack([boundary_char_ids(BOS_CHAR, width), boundary_char_ids(EOS_CHAR, width)]) + 1
        self._vocabulary_ids = None
        if vocab_to_cache is not None:
            self._vocabulary_ids = Batcher(None, width).batch_sentences([list(vocab_to_cache)])[0, 1:-1]
            self._vocabulary_ids[0] = 0  # index 0 is padding

    def get_output_dim(self):
        """`2 * projection_dim`, the size of each representation."""
        return 2 * self.options.projection_dim

    def build(self, input_shape=None):
        shape = (None, None, self.get_output_dim())
        for mix in self.scalar_mixes:
            mix.build([shape] * mix.mixture_size)
        self.built = True

    def call(self, inputs, word_inputs=None, training=None):
        if training is None:  # a torch.nn.Module's train()/eval() mode, as AllenNLP's dropout follows it
            training = bool(getattr(self, "training", False))
        if word_inputs is not None and self._vocabulary_ids is None:
            warnings.warn(f"{self.name}: word_inputs are read only with vocab_to_cache; the character ids are used "
                          "(as AllenNLP does).", stacklevel=2)
        elif word_inputs is not None:
            inputs = ops.take(ops.convert_to_tensor(self._vocabulary_ids), ops.cast(word_inputs, "int32"), axis=0)
        width = inputs.shape[-1]
        if width is not None and width != self.options.token_id_width:
            raise UserError(f"{self.name}: the inputs have {width} character ids a token and the model reads "
                            f"{self.options.token_id_width} (its max_characters_per_token); batch_to_ids gives "
                            f"{MAX_WORD_LENGTH}, as every published model reads.")
        leading = tuple(ops.shape(inputs)[:-1])
        inputs = ops.reshape(ops.cast(inputs, "int32"), (-1,) + tuple(ops.shape(inputs)[-2:]))
        layers, mask = self._layers_with_boundaries(inputs, training)
        representations = []
        for mix in self.scalar_mixes:
            representation, representation_mask = mix(layers, mask=mask), mask
            if not self.keep_sentence_boundaries:
                representation, representation_mask = _without_boundaries(representation, mask)
            if self.dropout and training:
                representation = keras.random.dropout(representation, self.dropout, seed=self.dropout_seed)
            representations.append(representation)
        if self.keep_sentence_boundaries:
            leading = leading[:-1] + (leading[-1] + 2,)
        return {"elmo_representations": [ops.reshape(r, leading + (self.get_output_dim(),))
                                         for r in representations],
                "mask": ops.reshape(representation_mask, leading)}

    def _layers_with_boundaries(self, ids, training):
        """`([n_layers + 1] x (batch, timesteps + 2, 2P), mask (batch, timesteps + 2))` of char ids `(batch,
        timesteps, C)`: the biLM's layers over each sentence between `<S>` and `</S>`, zero at padding."""
        batch, timesteps = ops.shape(ids)[0], ops.shape(ids)[1]
        lengths = ops.sum(ops.cast(ops.any(ids > 0, axis=-1), "int32"), axis=-1)
        positions = ops.arange(timesteps + 2, dtype="int32")[None, :]  # (1, timesteps + 2)
        padded = ops.pad(ids, [(0, 0), (1, 1), (0, 0)])
        boundaries = ops.convert_to_tensor(self._boundaries.astype(np.int32))
        is_bos = ops.expand_dims(positions == 0, -1)
        is_eos = ops.expand_dims(positions == ops.expand_dims(lengths, 1) + 1, -1)
        ids = ops.where(is_bos, boundaries[0], ops.where(is_eos, boundaries[1], padded))
        inputs = {"token_characters": ids}
        for key, _, size in state_keys(self.options):
            inputs[key] = ops.zeros((batch, size), "float32")
        # The biLM's training paths only where it trains (`requires_grad`); frozen, its inference paths (the fast
        # ones), which no gradient goes through.
        outputs = self.network(inputs, training=bool(training) and self.network.trainable)
        mask = positions < ops.expand_dims(lengths, 1) + 2
        keep = ops.expand_dims(ops.cast(mask, "float32"), -1)
        token = outputs["token_embeddings"]
        layers = [ops.concatenate([token, token], axis=-1) * keep]
        for layer in range(self.options.n_layers):
            layers.append(ops.concatenate([outputs[f"forward_{layer}"], outputs[f"backward_{layer}"]], axis=-1)
                          * keep)
        return layers, mask


def _without_boundaries(tensor, mask):
    """AllenNLP's `remove_sentence_boundaries`: `(batch, timesteps, dim)` and its mask from `(batch, timesteps +
    2, dim)` with `<S>` first and `</S>` after each row's tokens."""
    lengths = ops.sum(ops.cast(mask, "int32"), axis=-1) - 2
    inner = tensor[:, 1:-1]
    inner_mask = ops.arange(ops.shape(inner)[1], dtype="int32")[None, :] < ops.expand_dims(lengths, 1)
    return inner * ops.expand_dims(ops.cast(inner_mask, inner.dtype), -1), inner_mask
