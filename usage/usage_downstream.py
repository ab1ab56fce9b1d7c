"""ELMo inside a Keras model: does context from the biLM help a tagger?

A toy tagging task where a token's tag is the word class of the *previous*
token (tag 3 for the first token), so the token alone says nothing about
its tag. Two taggers with the same per-token classifier (no context of
their own: Dense layers applied to each position separately) are trained on
the same sentences:

- ELMo: `ELMoEmbedding(output="elmo")`, the learned scalar mix of all biLM
  layers (the default `mix="scalar"`); the LSTM layers carry context from
  the neighbouring tokens. Its learned weight of each layer is printed.
- ELMo with a learned function of each token's layers instead
  (`mix="dense"`: a dense layer over the token's concatenated layer
  vectors).
- Baseline: `ELMoEmbedding(output="word_emb")`, layer 0 only, the
  context-free character encoding of each token.

The biLM here has random weights (written with bilm's own `build_bilm` +
`save_bilm_weights`), so no download is needed; even so its LSTM states
carry enough about the previous token for the ELMo tagger to beat the
baseline by a wide margin. With a published model, point `options_file` and
`weight_file` at its files.

`--kernel_dtype bfloat16` (or `int8`) runs both biLMs with bfloat16 (int8) kernels
(`ELMoEmbedding(kernel_dtype="bfloat16")`), to see what 16- or 8-bit inference
costs a downstream model.

`--epochs` sets each tagger's training epochs (15; ELMo is already well ahead after 4).

Run: python usage/usage_downstream.py [--kernel_dtype bfloat16|int8] [--epochs 15]   (about a minute on 2 CPU cores)
"""
import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bilm import ELMoEmbedding  # noqa: E402
from bilm.models import write_random_model  # noqa: E402
from bilm.presets import get_preset  # noqa: E402

N_CLASSES = 3
FIRST_TOKEN_TAG = N_CLASSES
WORDS_PER_CLASS = 8
BATCH_SIZE = 64
EPOCHS = 15
HIDDEN = 256
LEARNING_RATE = 1e-2


def make_words(rng):
    """`N_CLASSES * WORDS_PER_CLASS` distinct random lowercase words, and each word's class."""
    words = set()
    while len(words) < N_CLASSES * WORDS_PER_CLASS:
        words.add("".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(3, 7))))
    words = sorted(words)
    rng.shuffle(words)
    return words, {word: i % N_CLASSES for i, word in enumerate(words)}


def make_dataset(rng, words, word_class, n_sentences):
    """Padded tokens `(n, time)` (`''` padding) and tags `(n, time)` (0 at padding)."""
    lengths = rng.integers(4, 12, size=n_sentences)
    tokens = np.full((n_sentences, lengths.max()), "", dtype=object)
    tags = np.zeros((n_sentences, lengths.max()), dtype=np.int32)
    for row, length in enumerate(lengths):
        sentence = rng.choice(words, size=length)
        tokens[row, :length] = sentence
        tags[row, 0] = FIRST_TOKEN_TAG
        tags[row, 1:length] = [word_class[word] for word in sentence[:-1]]
    return tokens.astype(str), tags


def build_tagger(options_file, weight_file, output, mix="scalar", kernel_dtype="float32", jit_compile="auto"):
    """String tokens `(batch, time)` -> tag probabilities `(batch, time, N_CLASSES + 1)`; and its ELMoEmbedding.

    `jit_compile` goes to `Model.compile`: Keras compiles a model that takes
    text without XLA whatever it says (string ops), see `ELMoEmbedding`."""
    tokens = keras.Input(shape=(None,), dtype="string", name="tokens")
    # start="zeros": random weights hold no boundary state to start sentences from.
    elmo = ELMoEmbedding.from_files(options_file, weight_file, output=output, mix=mix, start="zeros",
                                    kernel_dtype=kernel_dtype, name=f"elmo_{output}")
    features = elmo(tokens)
    # Per-token classifier: Dense acts on each position on its own, so any
    # context must come from the features.
    hidden = keras.layers.Dense(HIDDEN, activation="relu", name="hidden")(features)
    probabilities = keras.layers.Dense(N_CLASSES + 1, activation="softmax", name="tags")(hidden)
    model = keras.Model(tokens, probabilities, name=f"tagger_{output}")
    model.compile(optimizer=keras.optimizers.Adam(LEARNING_RATE), loss="sparse_categorical_crossentropy",
                  jit_compile=jit_compile)
    return model, elmo


def token_accuracy(model, tokens, tags):
    """Accuracy over the real (non-padding) tokens."""
    predicted = np.argmax(model.predict(tf.constant(tokens), batch_size=256, verbose=0), axis=-1)
    real = tokens != ""
    return float(np.mean(predicted[real] == tags[real]))


def main(kernel_dtype="float32", epochs=EPOCHS):
    with tempfile.TemporaryDirectory(prefix="bilm_downstream_") as directory:
        return _run(directory, kernel_dtype, epochs)


def _run(directory, kernel_dtype, epochs):
    options_file, weight_file = write_random_model(directory, get_preset("tiny"), seed=0)

    rng = np.random.default_rng(0)
    words, word_class = make_words(rng)
    train = make_dataset(rng, words, word_class, 2000)
    heldout = make_dataset(rng, words, word_class, 500)
    dataset = tf.data.Dataset.from_tensor_slices(train).shuffle(2000, seed=0).batch(BATCH_SIZE)

    scores, layer_weights = {}, None
    for output, mix in (("elmo", "scalar"), ("elmo", "dense"), ("word_emb", "scalar")):
        keras.utils.set_random_seed(1)
        model, elmo = build_tagger(options_file, weight_file, output, mix, kernel_dtype)
        model.fit(dataset, epochs=epochs, shuffle=False, verbose=0)  # the dataset shuffles
        scores[output if mix == "scalar" else f"{output}_{mix}"] = token_accuracy(model, *heldout)
        if (output, mix) == ("elmo", "scalar"):
            layer_weights = elmo.mix.layer_weights()

    majority = max(np.mean(heldout[1][heldout[0] != ""] == tag) for tag in range(N_CLASSES + 1))
    print(f"biLM kernels: {kernel_dtype}")
    print(f"held-out token accuracy, majority tag:                 {majority:.3f}")
    print(f"held-out token accuracy, word_emb only (layer 0):      {scores['word_emb']:.3f}")
    print(f"held-out token accuracy, ELMo (all layers mixed):      {scores['elmo']:.3f}")
    print(f"held-out token accuracy, ELMo (mix='dense'):           {scores['elmo_dense']:.3f}")
    print("learned weight of layers 0, 1, 2 in the scalar mix:  ", " ".join(f"{w:.2f}" for w in layer_weights))
    return scores


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel_dtype", choices=("float32", "bfloat16", "int8"), default="float32")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="each tagger's training epochs")
    arguments = parser.parse_args()
    if arguments.epochs < 1:
        parser.error(f"--epochs must be at least 1, not {arguments.epochs}")
    main(arguments.kernel_dtype, arguments.epochs)
