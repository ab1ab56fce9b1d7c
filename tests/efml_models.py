"""Small ELMoForManyLangs model folders written from numbers the tests choose, in its published layout.

`write_model(folder, layout)` writes `config.json` (its `config_path` a
path on another machine, found by its base name in the folder, as in the
published models), the architecture file, `char.dic` and `word.dic` as its
training code writes them (`entry<TAB>id`, the ideographic space written
as itself, so that the line keeps one field once stripped) and the two
state dicts as PyTorch saves them (`layout`: "legacy" or "zip"). The model
returned is what `efml_reference.embed_sentence` runs.
"""
import io
import json
import os
import tarfile
import zipfile

import numpy as np

import efml_reference
from torch_pickles import save_state_dict

ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 6, "cell_clip": 1, "proj_clip": 1, "dim": 10, "n_layers": 2},
    "token_embedder": {"name": "cnn", "activation": "relu", "filters": [[1, 4], [2, 5], [3, 3]], "n_highway": 2,
                       "word_dim": 4, "char_dim": 3, "max_characters_per_token": 8},
    "classifier": {"name": "sampled_softmax", "n_samples": 16},
    "dropout": 0.1,
}
CHARACTERS = list("thecasdogrnäü中文") + ["\u3000"]
WORDS = ["the", "cat", "sat", "a", "dog", "中文", "longwordis"]
# Sentences that meet every rule: unknown words and characters, tokens cut to
# 6 characters (one then known as a word), the ideographic space, a token
# spelled as the boundary, one-token and empty sentences.
SENTENCES = [
    ["the", "cat", "sat"],
    ["a", "dog", "Zebra", "中文", "ü"],
    ["longwordisverylong", "\u3000", "x", "<bos>", "the"],
    ["cat"],
    [],
    ["sat", "sat", "the", "the", "a", "cat", "dog"],
]


def architecture(**changes):
    """`ARCHITECTURE` with `changes` as `{"section.key": value}` (e.g. `{"token_embedder.word_dim": 0}`)."""
    arch = json.loads(json.dumps(ARCHITECTURE))
    for key, value in changes.items():
        section, name = key.split(".")
        arch[section][name] = value
    return arch


def _ids(entries, specials):
    ids = {}
    for entry in [*entries, *specials]:
        ids.setdefault(entry, len(ids))
    return ids


def random_model(seed=0, arch=None):
    """The model's dictionaries and state dicts (PyTorch's layout), random but reproducible."""
    arch = arch or ARCHITECTURE
    te, enc = arch["token_embedder"], arch["encoder"]
    rng = np.random.default_rng(seed)
    char2id = _ids(CHARACTERS, ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"])
    word2id = _ids(["<oov>", "<bos>", "<eos>", "<pad>"], WORDS) if te["word_dim"] else None

    def normal(*shape, scale=0.5):
        return (rng.normal(size=shape) * scale).astype(np.float32)

    n_filters = sum(n for _, n in te["filters"])
    token_embedder = {}
    if word2id is not None:
        token_embedder["word_emb_layer.embedding.weight"] = normal(len(word2id), te["word_dim"])
    token_embedder["char_emb_layer.embedding.weight"] = normal(len(char2id), te["char_dim"])
    for i, (width, num) in enumerate(te["filters"]):
        token_embedder[f"convolutions.{i}.weight"] = normal(num, te["char_dim"], width)
        token_embedder[f"convolutions.{i}.bias"] = normal(num)
    for k in range(te["n_highway"]):
        token_embedder[f"highways._layers.{k}.weight"] = normal(2 * n_filters, n_filters, scale=0.3)
        token_embedder[f"highways._layers.{k}.bias"] = normal(2 * n_filters)
    token_embedder["projection.weight"] = normal(enc["projection_dim"], te["word_dim"] + n_filters, scale=0.3)
    token_embedder["projection.bias"] = normal(enc["projection_dim"])
    encoder = {}
    p, cell = enc["projection_dim"], enc["dim"]
    for direction in ("forward", "backward"):
        for layer in range(enc["n_layers"]):
            prefix = f"{direction}_layer_{layer}"
            # Large enough for both clips to act.
            encoder[f"{prefix}.input_linearity.weight"] = normal(4 * cell, p)
            encoder[f"{prefix}.state_linearity.weight"] = normal(4 * cell, p)
            encoder[f"{prefix}.state_linearity.bias"] = normal(4 * cell)
            encoder[f"{prefix}.state_projection.weight"] = normal(p, cell, scale=1.0)
    return {"architecture": arch, "char2id": char2id, "word2id": word2id, "token_embedder": token_embedder,
            "encoder": encoder}


def write_dictionary(path, ids):
    """A dictionary file as ELMoForManyLangs' training writes it: `entry<TAB>id` lines."""
    with open(path, "w", encoding="utf-8") as f:
        for entry, i in ids.items():
            f.write(f"{entry}\t{i}\n")


def write_model(folder, layout="legacy", seed=0, arch=None):
    """Writes a model folder (see the module docstring); returns the model for `efml_reference`."""
    model = random_model(seed, arch)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"seed": 1, "config_path": "/home/someone/conll2018/configs/cnn_small.json",
                   "model": "/home/someone/final_models/xx.model", "max_sent_len": 20}, f)
    with open(os.path.join(folder, "cnn_small.json"), "w", encoding="utf-8") as f:
        json.dump(model["architecture"], f)
    write_dictionary(os.path.join(folder, "char.dic"), model["char2id"])
    if model["word2id"] is not None:
        write_dictionary(os.path.join(folder, "word.dic"), model["word2id"])
    save_state_dict(model["token_embedder"], os.path.join(folder, "token_embedder.pkl"), layout)
    save_state_dict(model["encoder"], os.path.join(folder, "encoder.pkl"), layout)
    return model


def archive_bytes(folder, kind, top="xx.model"):
    """The files of `folder` in one top folder `top`, as a zip (`kind` "zip") or tar ("tar.bz2", "tar.gz")."""
    buffer = io.BytesIO()
    names = sorted(os.listdir(folder))
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w") as archive:
            for name in names:
                archive.write(os.path.join(folder, name), f"{top}/{name}")
    else:
        with tarfile.open(fileobj=buffer, mode="w:" + kind.split(".")[1]) as archive:
            for name in names:
                archive.add(os.path.join(folder, name), f"{top}/{name}")
    return buffer.getvalue()


def reference_layers(model, sentences=SENTENCES):
    """`efml_reference.embed_sentence` of each sentence."""
    return [efml_reference.embed_sentence(sentence, model) for sentence in sentences]
