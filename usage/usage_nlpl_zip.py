"""A model published the NLPL repository's way (one zip), loaded and embedded in three lines.

The NLPL repository publishes each ELMo model as a zip holding options.json,
model.hdf5, vocab.txt and meta.json. This example builds such a zip from a
tiny random model, then loads it as it would a downloaded one; a URL works
the same, e.g. bilm.load("https://host/path/model.zip"), downloaded once into
the cache. Everything is written to a temporary folder, removed at the end.

Run: python usage/usage_nlpl_zip.py
"""
import json
import os
import tempfile
import zipfile

import _example_model as example

import bilm

with tempfile.TemporaryDirectory(prefix="bilm_nlpl_") as directory:
    paths = example.make_example(os.path.join(directory, "random_model"))
    zip_file = os.path.join(directory, "model.zip")
    with zipfile.ZipFile(zip_file, "w") as archive:
        archive.write(paths["options_file"], "elmo_model/options.json")
        archive.write(paths["weight_file"], "elmo_model/model.hdf5")
        archive.write(paths["vocab_file"], "elmo_model/vocab.txt")
        archive.writestr("elmo_model/meta.json", json.dumps({"corpus": "random weights", "lemmatized": False}))

    # The zip is extracted once into cache_dir (default: $BILM_CACHE, else ~/.cache/bilm).
    elmo = bilm.load(zip_file, cache_dir=os.path.join(directory, "cache"))
    print("metadata:", elmo.metadata)
    sentences = ["Pretrained biLMs compute representations useful for NLP tasks .", "What are biLMs useful for ?"]
    average = elmo.embed(sentences)
    every_layer = elmo.embed([sentence.split() for sentence in sentences], layers="all")
    print("average of the layers, (n_tokens, 2P) per sentence:", [v.shape for v in average])
    print("all layers, (n_layers + 1, n_tokens, 2P) per sentence:", [v.shape for v in every_layer])
    print("sentence vectors (n_sentences, 2P):", elmo.sentence_vectors(sentences).shape)
