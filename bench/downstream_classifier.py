"""The task model of bench_downstream.py: one Keras sentence classifier, with or without ELMo.

The biLM's layers are computed once per sentence (`embed_layers`, with
`bilm.load(...).embed(layers="all")`) and kept as float16; the classifier
reads them through a `bilm.layers.WeightLayers` mix, so a run trains only
the task model and the mix, as `ELMoEmbedding` with a frozen biLM would, at
a fraction of the cost.

A variant (`Variant`) says which inputs the classifier reads (ELMo through a
mix, word vectors learned from the task, or both, concatenated as the ELMo
paper does) and how: a convolution over the tokens (width 3, 128 filters)
with max pooling (`"tokens"`; a BiLSTM was the first choice, but one run
of it took over five minutes on the shared 2-core machine, so it was left
out unmeasured), or the mean of the token vectors into a one-hidden-layer network
(`"mean"`); layer normalisation, dropout on the ELMo vectors and the mix's
L2 coefficient (the paper's lambda) are options.
"""
import collections
import dataclasses

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from bilm.layers import WeightLayers

WORD_DIM = 128
CONV_FILTERS = 128
CONV_WIDTH = 3
HIDDEN = 64
BATCH_SIZE = 64
MAX_EPOCHS = 8
PATIENCE = 1
LEARNING_RATE = 1e-3


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of building the classifier (see the module docstring)."""
    mix: str = None          # a WeightLayers mix, or None for no ELMo
    words: bool = False      # word vectors learned from the task
    reader: str = "tokens"   # "tokens" (convolution + max pooling) or "mean" (mean of the tokens, then an MLP)
    layer_norm: bool = False
    elmo_dropout: float = 0.0
    l2_coef: float = None
    frozen_seed: bool = True  # a "frozen" mix at a random draw seeded by the run's seed (else equal weights)


# === Features ===

class Split:
    """One split's sentences: labels, word ids and (optionally) the biLM's layers, flat with offsets."""

    def __init__(self, examples, word_index, layers=None):
        self.labels = np.array([label for _, label in examples], np.int32)
        self.lengths = np.array([len(tokens) for tokens, _ in examples], np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.words = np.array([word_index.get(token.lower(), 1) for tokens, _ in examples for token in tokens],
                              np.int32)
        self.layers = layers  # (n_tokens, n_layers, dim) float16, or None

    def __len__(self):
        return len(self.labels)

    def batch(self, rows):
        """Padded inputs of `rows`: `{"words": (B, T), "mask": (B, T), "layers": (B, n_layers, T, dim)}`."""
        time = int(self.lengths[rows].max())
        words = np.zeros((len(rows), time), np.int32)
        mask = np.zeros((len(rows), time), bool)
        layers = None if self.layers is None else np.zeros(
            (len(rows), self.layers.shape[1], time, self.layers.shape[2]), np.float32)
        for i, row in enumerate(rows):
            start, end = self.offsets[row], self.offsets[row + 1]
            words[i, : end - start] = self.words[start:end]
            mask[i, : end - start] = True
            if layers is not None:
                layers[i, :, : end - start] = self.layers[start:end].transpose(1, 0, 2)
        inputs = {"words": words, "mask": mask}
        if layers is not None:
            inputs["layers"] = layers
        return inputs


def word_index(examples):
    """`{lowercased token: id}` of the training split (0 is padding, 1 unknown)."""
    counts = collections.Counter(token.lower() for tokens, _ in examples for token in tokens)
    return {token: i + 2 for i, token in enumerate(sorted(counts, key=lambda t: (-counts[t], t)))}


def embed_layers(elmo, examples):
    """Every token's biLM layers, `(n_tokens, n_layers + 1, 2P)` float16, from a `bilm.ELMo`."""
    n_tokens = sum(len(tokens) for tokens, _ in examples)
    out = np.zeros((n_tokens, elmo.n_layers + 1, elmo.dim), np.float16)
    position = 0
    for layers in elmo.embed([tokens for tokens, _ in examples], layers="all", verbose=0):
        out[position: position + layers.shape[1]] = layers.transpose(1, 0, 2)
        position += layers.shape[1]
    return out


def batches(split, names, seed=None, batch_size=BATCH_SIZE):
    """A `tf.data.Dataset` of `(inputs, labels)` batches of `split` with the inputs in `names`.

    Shuffled anew each epoch (each pass over the dataset) when `seed` is given.
    """
    rng = None if seed is None else np.random.default_rng(seed)

    def generate():
        order = np.arange(len(split)) if rng is None else rng.permutation(len(split))
        for start in range(0, len(split), batch_size):
            rows = order[start: start + batch_size]
            inputs = split.batch(rows)
            yield {name: inputs[name] for name in names}, split.labels[rows]

    specs = {"words": tf.TensorSpec((None, None), tf.int32), "mask": tf.TensorSpec((None, None), tf.bool)}
    if split.layers is not None:
        specs["layers"] = tf.TensorSpec((None, split.layers.shape[1], None, split.layers.shape[2]), tf.float32)
    signature = ({name: specs[name] for name in names}, tf.TensorSpec((None,), tf.int32))
    return tf.data.Dataset.from_generator(generate, output_signature=signature).prefetch(2)


# === The model ===

class MaskedMaxPooling(keras.layers.Layer):
    """`(batch, time, dim)`, mask `(batch, time)` -> `(batch, dim)`, the max over the real tokens."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def compute_mask(self, inputs, mask=None):
        return None

    def call(self, inputs, mask):
        return ops.max(ops.where(mask[..., None], inputs, -1e9), axis=1)


class ZeroPadding(MaskedMaxPooling):
    """`(batch, time, dim)`, mask `(batch, time)` -> the same, zero at the padding."""

    def call(self, inputs, mask):
        return inputs * ops.cast(mask, inputs.dtype)[..., None]


class MaskedMeanPooling(MaskedMaxPooling):
    """`(batch, time, dim)`, mask `(batch, time)` -> `(batch, dim)`, the mean over the real tokens."""

    def call(self, inputs, mask):
        weights = ops.cast(mask, inputs.dtype)[..., None]
        return ops.sum(inputs * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)


def build_classifier(variant, n_words, n_layers, dim, seed, jit_compile="auto"):
    """The classifier of `variant`; returns `(model, its WeightLayers or None)`; `jit_compile` goes to
    `Model.compile` ("auto": XLA on a GPU machine)."""
    inputs = {"mask": keras.Input((None,), dtype="bool", name="mask")}
    mask = inputs["mask"]
    parts, mix = [], None
    if variant.mix is not None:
        inputs["layers"] = keras.Input((n_layers, None, dim), name="layers")
        frozen_seed = seed if variant.mix == "frozen" and variant.frozen_seed else None
        mix = WeightLayers(mix=variant.mix, l2_coef=variant.l2_coef, do_layer_norm=variant.layer_norm,
                           seed=frozen_seed, name="elmo_mix")
        elmo = mix(inputs["layers"], mask=mask)
        if variant.elmo_dropout:
            elmo = keras.layers.Dropout(variant.elmo_dropout, name="elmo_dropout")(elmo)
        parts.append(elmo)
    if variant.words:
        inputs["words"] = keras.Input((None,), dtype="int32", name="words")
        parts.append(keras.layers.Embedding(n_words, WORD_DIM, name="word_vectors")(inputs["words"]))
    features = parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="elmo_and_words")(parts)
    if variant.reader == "tokens":
        features = keras.layers.Dropout(0.3)(features)
        # Padding is zero for the convolution; the pooling takes the real tokens only.
        features = ZeroPadding()(features, mask)
        states = keras.layers.Conv1D(CONV_FILTERS, CONV_WIDTH, padding="same", activation="relu")(features)
        pooled = keras.layers.Dropout(0.3)(MaskedMaxPooling()(states, mask))
    else:
        pooled = keras.layers.Dense(HIDDEN, activation="relu")(MaskedMeanPooling()(features, mask))
        pooled = keras.layers.Dropout(0.3)(pooled)
    probabilities = keras.layers.Dense(2, activation="softmax", name="label")(pooled)
    model = keras.Model(inputs, probabilities)
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"], jit_compile=jit_compile)
    return model, mix


def train_and_test(variant, splits, n_words, seed):
    """Trains `variant` on `splits["train"]` (early stopping on dev accuracy) and tests it.

    Returns a dict: `dev`, `test` accuracies, `epochs` trained, and for an
    ELMo variant the mix's `layer_weights` (on the test split's tokens for
    an attention mix) and `gamma` (None for mixes without one).
    """
    keras.utils.set_random_seed(seed)
    train = splits["train"]
    n_layers, dim = (train.layers.shape[1], train.layers.shape[2]) if train.layers is not None else (1, 1)
    model, mix = build_classifier(variant, n_words, n_layers, dim, seed)
    stop = keras.callbacks.EarlyStopping(monitor="val_accuracy", patience=PATIENCE, mode="max",
                                         restore_best_weights=True)
    names = list(model.input)
    history = model.fit(batches(train, names, seed=seed), epochs=MAX_EPOCHS, verbose=0, shuffle=False,
                        validation_data=batches(splits["dev"], names), callbacks=[stop])
    result = {"epochs": len(history.history["loss"])}
    for name in ("dev", "test"):
        predicted = np.argmax(model.predict(batches(splits[name], names, batch_size=256), verbose=0), axis=-1)
        result[name] = float(np.mean(predicted == splits[name].labels))
    if mix is not None:
        test = splits["test"]
        sample = test.batch(np.arange(min(len(test), 512)))
        result["layer_weights"] = mix.layer_weights(sample["layers"], sample["mask"]).tolist()
        result["gamma"] = None if mix.gamma is None else float(mix.gamma.numpy()[0])
    return result
