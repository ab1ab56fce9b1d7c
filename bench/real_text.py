"""Real English text for the benches: the GCIDE dictionary's definitions and quotations as sentence shards.

Debian's `dict-gcide` package holds the Collaborative International
Dictionary of English (Webster's 1913 and additions) as a dictzip file,
which Python's gzip reads. `gcide_sentences` streams its prose: the
definition text and the quotations of each entry, without headwords,
etymologies, sources and markup, cut into sentences and tokenized (words,
numbers and punctuation apart). `write_gcide_shards` writes them as
bilm's training layout: shards of one sentence per line and a held-out
file. Nothing here is needed by the package or the tests.
"""
import gzip
import itertools
import os
import re
import shutil
import subprocess
import sys

GCIDE_FILE = "/usr/share/dictd/gcide.dict.dz"
_MARKUP = [
    (re.compile(r"\[[^\]]*\]"), " "),          # [1913 Webster], [Obs.], [R.]
    (re.compile(r"--\s*[A-Z][\w.' ]*\.?"), " "),  # --Shak. --Jer. Taylor.
    (re.compile(r"\{([^}]*)\}"), r"\1"),          # {cross references}
    (re.compile(r"\\[^\\]*\\"), " "),             # \pro*nun"ci*a`tion\
    (re.compile(r'"'), " "),
]
_TOKEN = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+|[^\w\s]")
_SENTENCE_END = re.compile(r"(?<=[.;?!])\s+(?=[A-Z\"(])")


def ensure_gcide():
    """Installs `dict-gcide` with apt-get when its file is missing (needs root and Debian's archive)."""
    if os.path.exists(GCIDE_FILE):
        return GCIDE_FILE
    if shutil.which("apt-get") is None:
        sys.exit(f"{GCIDE_FILE} is missing and there is no apt-get: install Debian's dict-gcide package.")
    print("Installing Debian's dict-gcide (real English text for the bench)...", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "dict-gcide"], check=True)
    return GCIDE_FILE


def _blocks(path):
    """Paragraphs of the dictionary (runs of non-blank lines), joined into one line each."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for blank, lines in itertools.groupby(f, key=lambda line: not line.strip()):
            if not blank:
                yield " ".join(line.strip() for line in lines)


def gcide_sentences(path=GCIDE_FILE, min_tokens=4, max_tokens=60):
    """Yields the dictionary's prose as tokenized sentences (`str`, tokens separated by single spaces)."""
    for block in _blocks(path):
        if block.startswith(("Syn:", "Note:", "Usage:")):
            block = block.split(":", 1)[1]
        elif re.match(r"^[^ ]+ \\", block):  # an entry's head: headword, pronunciation, etymology
            continue
        block = re.sub(r"^\d+\.\s*", "", block)  # sense numbers
        for pattern, replacement in _MARKUP:
            block = pattern.sub(replacement, block)
        for sentence in _SENTENCE_END.split(block):
            tokens = _TOKEN.findall(sentence)
            if min_tokens <= len(tokens) <= max_tokens and sum(t.isalpha() for t in tokens) >= min_tokens - 1:
                yield " ".join(tokens)


def write_gcide_shards(directory, n_train_tokens, n_heldout_tokens=50_000, n_shards=10, seed=0):
    """Writes `directory/train/shard_<i>.txt` and `directory/heldout/heldout.txt` from GCIDE, once.

    Sentences are dealt to the held-out file (every 50th, up to
    `n_heldout_tokens`) and round-robin to the shards until
    `n_train_tokens`. A directory that already holds the files with a
    `done` marker for the same sizes is reused.

    Returns:
        `{"train": glob, "heldout": glob, "n_train_tokens": int}`.
    """
    marker = os.path.join(directory, "done")
    wanted = f"{n_train_tokens} {n_heldout_tokens} {n_shards} {seed}"
    files = {"train": os.path.join(directory, "train", "shard_*.txt"),
             "heldout": os.path.join(directory, "heldout", "*.txt")}
    if os.path.exists(marker) and open(marker).read().split("\n")[0] == wanted:
        return {**files, "n_train_tokens": int(open(marker).read().split("\n")[1])}
    ensure_gcide()
    for sub in ("train", "heldout"):
        os.makedirs(os.path.join(directory, sub), exist_ok=True)
    shards = [open(os.path.join(directory, "train", f"shard_{i}.txt"), "w") for i in range(n_shards)]
    heldout = open(os.path.join(directory, "heldout", "heldout.txt"), "w")
    n_train = n_heldout = 0
    try:
        for i, sentence in enumerate(gcide_sentences()):
            n = len(sentence.split())
            if i % 50 == seed % 50 and n_heldout < n_heldout_tokens:
                heldout.write(sentence + "\n")
                n_heldout += n
            elif n_train < n_train_tokens:
                shards[i % n_shards].write(sentence + "\n")
                n_train += n
            elif n_heldout >= n_heldout_tokens:
                break
    finally:
        for f in shards + [heldout]:
            f.close()
    with open(marker, "w") as f:
        f.write(f"{wanted}\n{n_train}\n")
    return {**files, "n_train_tokens": n_train}
