#!/usr/bin/env python
"""bilm.compat.elmoformanylangs against ELMoForManyLangs' own `Embedder`, on the same weights and real sentences.

Fetches ELMoForManyLangs' wheel once (`pip download elmoformanylangs
--no-deps`, written for PyTorch 0.4; it runs on today's) and imports it with
`overrides` (a decorator it uses only to mark methods) stood in for. A
random model of its small CNN-encoder architecture is drawn with its own
classes (`--seed`) and saved as its training saves one (`config.json`, the
architecture, `char.dic`, `word.dic`, `token_embedder.pkl`,
`encoder.pkl`); bilm converts that folder. Both then embed the first
`--sentences` GCIDE sentences (bench/real_text.py) and the script prints the
largest difference of the vectors, for each `output_layer`:
- each sentence through a new `Embedder` (its LSTM states start at zeros,
  as bilm's do for every sentence);
- all sentences through one `Embedder` in batches of `--batch_size`: its
  biLM carries each batch row's LSTM states into the next batch (in a
  shuffled order), which bilm deliberately does not (docs/migrating.md).

    python bench/bench_efml_parity.py --sentences 24
"""
import os
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from real_text import spread_sentences, wheel_folder  # noqa: E402

ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 64, "cell_clip": 3, "proj_clip": 3, "dim": 128, "n_layers": 2},
    "token_embedder": {"name": "cnn", "activation": "relu", "filters": [[1, 16], [2, 16], [3, 32], [4, 32]],
                       "n_highway": 2, "word_dim": 32, "char_dim": 16, "max_characters_per_token": 50},
    "classifier": {"name": "sampled_softmax", "n_samples": 64},
    "dropout": 0.1,
}


def write_random_model(folder, sentences, seed):
    """A model folder as ELMoForManyLangs' training writes one, drawn with its own classes."""
    import torch
    from elmoformanylangs.frontend import Model
    from elmoformanylangs.modules.embedding_layer import EmbeddingLayer

    torch.manual_seed(seed)
    words = sorted({word for sentence in sentences for word in sentence})[::2]  # half the words known
    characters = sorted({char for sentence in sentences for word in sentence for char in word})[::2]
    word2id = {word: i for i, word in enumerate(["<oov>", "<bos>", "<eos>", "<pad>", *words])}
    char2id = {char: i for i, char in enumerate([*characters, "<bos>", "<eos>", "<oov>", "<pad>", "<bow>",
                                                 "<eow>"])}
    te = ARCHITECTURE["token_embedder"]
    model = Model(ARCHITECTURE, EmbeddingLayer(te["word_dim"], word2id, fix_emb=False),
                  EmbeddingLayer(te["char_dim"], char2id, fix_emb=False))
    with torch.no_grad():
        for parameter in model.encoder.parameters():  # the LSTMs' start is tiny: weights that move the states
            parameter.normal_(0.0, 0.1)
    os.makedirs(folder + ".partial")
    torch.save(model.token_embedder.state_dict(), os.path.join(folder + ".partial", "token_embedder.pkl"))
    torch.save(model.encoder.state_dict(), os.path.join(folder + ".partial", "encoder.pkl"))
    for name, ids in (("char.dic", char2id), ("word.dic", word2id)):
        with open(os.path.join(folder + ".partial", name), "w", encoding="utf-8") as f:
            f.writelines(f"{entry}\t{i}\n" for entry, i in ids.items())
    harness.write_report(ARCHITECTURE, os.path.join(folder + ".partial", "cnn_bench.json"), overwrite=True)
    harness.write_report({"seed": seed, "config_path": "cnn_bench.json", "max_sent_len": 20},
                         os.path.join(folder + ".partial", "config.json"), overwrite=True)
    os.replace(folder + ".partial", folder)


def main():
    args = harness.parser(__doc__, sentences=24, batch_size=8, seed=0,
                          cache_dir=os.path.join(tempfile.gettempdir(), "bilm_efml_parity")).parse_args()
    import numpy as np

    # ELMoForManyLangs' package from its wheel; `overrides` only marks methods.
    sys.path.insert(0, wheel_folder(args.cache_dir, "elmoformanylangs", "elmoformanylangs"))
    sys.modules.setdefault("overrides", types.SimpleNamespace(overrides=lambda method: method))
    import elmoformanylangs as original

    sentences = spread_sentences(args.sentences, max_tokens=30)
    folder = os.path.join(args.cache_dir, f"model-{args.seed}-{args.sentences}")
    if not os.path.isdir(folder):
        write_random_model(folder, sentences, args.seed)
    from bilm.compat.elmoformanylangs import Embedder

    ours = Embedder(folder, batch_size=args.batch_size)
    print(f"{len(sentences)} GCIDE sentences, ELMoForManyLangs' CNN encoder (random, seed {args.seed}); "
          f"largest |difference| of the vectors:")
    print(f"{'output_layer':>12} {'each sentence alone':>20} {'batches of ' + str(args.batch_size):>16}")
    for layer in (-1, 0, 1, 2):
        alone = [original.Embedder(folder).sents2elmo([sentence], output_layer=layer)[0] for sentence in sentences]
        batched = original.Embedder(folder, batch_size=args.batch_size).sents2elmo(sentences, output_layer=layer)
        mine = ours.sents2elmo(sentences, output_layer=layer)
        worst_alone = max(float(np.abs(a - b).max()) for a, b in zip(alone, mine))
        worst_batched = max(float(np.abs(a - b).max()) for a, b in zip(batched, mine))
        print(f"{layer:>12} {worst_alone:>20.2e} {worst_batched:>16.2e}")
    print(f"(vectors' scale: {float(np.mean([np.abs(v).mean() for v in mine])):.3f} mean |value|)")


if __name__ == "__main__":
    main()
