#!/usr/bin/env python
"""Adapting a pretrained biLM to a domain's text: held-out perplexity after the same steps, by start.

Two generated corpora stand for general and domain text
(`write_corpora`): a class-based hidden Markov model of pseudo-English whose
word classes have their own word shapes (suffixes), the domain's with other
transition probabilities, other word frequencies, and a third of its content
words its own (made by the same shape rules). A small biLM is pretrained
on the general corpus and dumped as a published model would be (options +
weights, no softmax). Then, for the same number of steps on the domain
corpus, with the same settings, it reports the domain's held-out perplexity
(full softmax) for:
- scratch: a new model of the same architecture;
- random: adapted (`--init_from`) with a random softmax (`--softmax_init random`);
- encoding, fit: adapted with the other initialisations;
each adapted start also with the softmax trained alone for the first steps
(`--softmax_warmup_steps`), and with the words' log frequencies in the bias
(`random+frequency`, ...: `initialize_softmax_of_state(..., frequency_bias=True)`,
which no flag offers). Step 0 is the held-out perplexity before any step
(the initialisation alone).

    nice -n 10 python bench/bench_adapt.py --work_dir /tmp/bench_adapt

The pretrained model is kept in DIRECTORY/general_model and reused by a
later run only when it was pretrained with the same steps, corpus size and
options (`pretraining.json` beside it); otherwise it is trained again.
"""
import functools
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import harness  # noqa: E402
import numpy as np  # noqa: E402
from common import REFERENCE_MODEL as ARCHITECTURE  # noqa: E402

from bilm.training import build_vocab, dump_weights, evaluate_from_files, train_from_files  # noqa: E402
from bilm.training.arrays import softmax_init, training_run  # noqa: E402

SETTINGS = {"batch_size": 32, "unroll_steps": 20, "n_negative_samples_batch": 256, "dropout": 0.1,
            "learning_rate": 0.2, "n_epochs": 100}

# === The corpora: a class HMM of pseudo-English ===

# Word classes: (number of words, suffixes their words end in). Function
# words are few and shared; content classes are many, and a domain has its own.
CLASSES = {
    "DET": (8, None), "PRON": (6, None), "PREP": (10, None), "CONJ": (5, None), "AUX": (6, None),
    "ADJ": (360, ("ous", "al", "ive", "ic")),
    "ANIMATE": (480, ("er", "ist", "ian", "or")),
    "THING": (800, ("ment", "tion", "et", "ure")),
    "PLACE": (280, ("ia", "ville", "ton", "port")),
    "VERB_I": (240, ("izes", "ates", "ifies")),
    "VERB_T": (400, ("ects", "ains", "ounds", "ends")),
    "ADV": (160, ("ly",)),
}
FUNCTION_WORDS = {
    "DET": ["the", "a", "this", "every", "some", "my", "our", "that"],
    "PRON": ["he", "she", "it", "they", "we", "one"],
    "PREP": ["in", "on", "near", "from", "with", "under", "over", "into", "at", "by"],
    "CONJ": ["and", "but", "while", "because", "so"],
    "AUX": ["will", "can", "must", "may", "should", "did"],
}
# Transitions between classes: {class: {next: weight}}; "<END>" ends the sentence.
TRANSITIONS = {
    "<START>": {"DET": 6, "PRON": 2, "ADJ": 1, "ANIMATE": 1},
    "DET": {"ADJ": 3, "ANIMATE": 4, "THING": 4, "PLACE": 1},
    "ADJ": {"ADJ": 1, "ANIMATE": 3, "THING": 3, "PLACE": 2},
    "ANIMATE": {"VERB_I": 3, "VERB_T": 4, "AUX": 2, "PREP": 1, "CONJ": 0.3, "<END>": 0.5},
    "THING": {"VERB_I": 1, "VERB_T": 1, "PREP": 3, "CONJ": 1, "<END>": 3},
    "PLACE": {"PREP": 1, "CONJ": 1, "<END>": 4},
    "PRON": {"VERB_I": 3, "VERB_T": 4, "AUX": 2},
    "AUX": {"VERB_I": 2, "VERB_T": 3, "ADV": 1},
    "VERB_I": {"ADV": 2, "PREP": 3, "CONJ": 1, "<END>": 3},
    "VERB_T": {"DET": 6, "THING": 2, "PRON": 1},
    "ADV": {"PREP": 2, "CONJ": 1, "VERB_T": 1, "<END>": 3},
    "PREP": {"DET": 5, "PLACE": 3, "THING": 1},
    "CONJ": {"DET": 3, "PRON": 3},
}
# The domain's changes: more modifiers and prepositional phrases, fewer pronouns.
DOMAIN_TRANSITIONS = {
    "<START>": {"DET": 5, "PRON": 0.5, "ADJ": 3, "THING": 2},
    "DET": {"ADJ": 5, "ANIMATE": 2, "THING": 6, "PLACE": 1},
    "THING": {"VERB_I": 1, "VERB_T": 2, "PREP": 5, "CONJ": 0.5, "THING": 1, "<END>": 2},
    "VERB_T": {"DET": 5, "THING": 4, "ADJ": 2},
}
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"] + ["tra", "pro", "sel", "mon", "vin", "cor"]
DOMAIN_NEW_SHARE = 1 / 3


def _words(rng, n, suffixes, taken):
    """`n` new pseudo-words, each 1-3 syllables and one of `suffixes`."""
    words = []
    while len(words) < n:
        stem = "".join(rng.choice(SYLLABLES, size=rng.integers(1, 4)))
        word = stem + suffixes[rng.integers(len(suffixes))]
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def _lexicons(seed):
    """`({class: general words}, {class: domain words})`, most frequent first (Zipf ranks)."""
    rng = np.random.default_rng(seed)
    taken = set(word for words in FUNCTION_WORDS.values() for word in words)
    general, domain = {}, {}
    for name, (n, suffixes) in CLASSES.items():
        if suffixes is None:
            general[name] = domain[name] = FUNCTION_WORDS[name]
            continue
        general[name] = _words(rng, n, suffixes, taken)
        n_new = int(n * DOMAIN_NEW_SHARE)
        kept = list(rng.permutation(general[name]))[: n - n_new]  # kept words, other frequencies
        domain[name] = list(rng.permutation(kept + _words(rng, n_new, suffixes, taken)))
    return general, domain


def _sampler(transitions, lexicon, rng):
    classes = {name: (list(nexts), np.array(list(nexts.values()), float) / sum(nexts.values()))
               for name, nexts in transitions.items()}
    emissions = {}
    for name, words in lexicon.items():
        weights = 1.0 / (np.arange(len(words)) + 2.0)
        emissions[name] = (words, weights / weights.sum())

    def sentence():
        tokens, state = [], "<START>"
        while True:
            nexts, p = classes[state]
            state = nexts[rng.choice(len(nexts), p=p)]
            if state == "<END>" or len(tokens) > 40:
                return tokens + ["."]
            words, q = emissions[state]
            tokens.append(words[rng.choice(len(words), p=q)])

    return sentence


def write_corpora(directory, n_general, n_domain, n_heldout, seed=0):
    """Writes `general/train.txt`, `domain/train.txt`, `domain/heldout.txt` and each training file's
    vocabulary (`vocab.txt` beside it); returns their paths."""
    general_lexicon, domain_lexicon = _lexicons(seed)
    rng = np.random.default_rng(seed + 1)
    samplers = {"general": _sampler(TRANSITIONS, general_lexicon, rng),
                "domain": _sampler({**TRANSITIONS, **DOMAIN_TRANSITIONS}, domain_lexicon, rng)}
    paths = {}
    for name, files in (("general", {"train": n_general}), ("domain", {"train": n_domain, "heldout": n_heldout})):
        os.makedirs(os.path.join(directory, name), exist_ok=True)
        for part, n in files.items():
            path = os.path.join(directory, name, f"{part}.txt")
            with open(path, "w") as f:
                f.writelines(" ".join(samplers[name]()) + "\n" for _ in range(n))
            paths[f"{name}_{part}"] = path
        vocab = os.path.join(directory, name, "vocab.txt")
        build_vocab(paths[f"{name}_train"], vocab)  # the text just written, whatever an earlier run wrote
        paths[f"{name}_vocab"] = vocab
    return paths


def _overlap(paths):
    """Shares of the domain's held-out tokens whose word the general vocabulary has."""
    general = set(open(paths["general_vocab"]).read().split())
    tokens = open(paths["domain_heldout"]).read().split()
    return sum(token in general for token in tokens) / len(tokens)


# === The runs ===

def pretrain(paths, directory, steps, n_general, options=None, text="the general corpus"):
    """The general model (`options`, default this bench's), dumped as options + weights; reused when an earlier
    run made it the same way. `paths` has `general_train` and `general_vocab`; `text` names them in the log."""
    options = options or {**ARCHITECTURE, **SETTINGS}
    model_dir = os.path.join(directory, "general_model")
    weights = os.path.join(model_dir, "weights.hdf5")
    record = os.path.join(model_dir, "pretraining.json")
    how = {"steps": steps, "n_general": n_general, "options": options}
    if os.path.exists(record) and os.path.exists(weights) and harness.read_json(record) == how:
        return model_dir
    shutil.rmtree(model_dir, ignore_errors=True)
    save_dir = os.path.join(directory, "general_ckpt")
    shutil.rmtree(save_dir, ignore_errors=True)
    options_file = os.path.join(directory, "general_options.json")
    harness.write_report(options, options_file, overwrite=True)
    started = time.perf_counter()
    train_from_files(paths["general_train"], paths["general_vocab"], save_dir, options_file, max_steps=steps,
                     checkpoint_every=10 ** 9, verbose=0)
    print(f"Pretrained {steps} steps on {text} in {time.perf_counter() - started:.0f} s.")
    os.makedirs(model_dir, exist_ok=True)
    dump_weights(save_dir, weights)
    harness.write_report(how, record, overwrite=True)  # last: a model without it is never reused
    return model_dir


def run(paths, directory, name, steps, options, text="domain", at_least=0, **kwargs):
    """The held-out perplexity of `text` (`paths`' `<text>_train`, `_heldout` and `_vocab`) at each of `steps`
    (the first at least `at_least`) of one start, `options` and `train_from_files`' `kwargs`, the run restarted
    between them (which continues it exactly); and the seconds its training took."""
    save_dir = os.path.join(directory, "runs", name)
    shutil.rmtree(save_dir, ignore_errors=True)
    options_file = os.path.join(directory, f"{name}_options.json")
    harness.write_report(options, options_file, overwrite=True)
    train, vocab = paths[f"{text}_train"], paths[f"{text}_vocab"]
    common = {"checkpoint_every": 10 ** 9, "verbose": 0}
    perplexities, seconds, done = [], 0.0, 0
    for step in steps:
        started = time.perf_counter()
        if not perplexities:
            train_from_files(train, vocab, save_dir, options_file, max_steps=max(step, at_least), **common, **kwargs)
        else:
            train_from_files(train, vocab, save_dir, restart=True, max_steps=step - done,
                             overrides=kwargs.get("overrides"), **common)
        seconds += time.perf_counter() - started
        done = max(step, at_least)
        perplexities.append(evaluate_from_files(paths[f"{text}_heldout"], vocab, save_dir, batch_size=64, verbose=0))
    return perplexities, seconds


def main(argv=None):
    parser = harness.parser(__doc__, work_dir=harness.REQUIRED, pretrain_steps=3000,
                            domain_steps=[0, 25, 50, 100, 200, 400, 800], n_general=40000)
    parser.add_argument("--warmup_steps", type=int, default=50,
                        help="of --domain_steps, the softmax alone (warm-up rows)")
    parser.add_argument("--n_domain", type=int, default=20000, help="sentences of the domain's training text")
    parser.add_argument("--n_heldout", type=int, default=2000, help="sentences of the domain's held-out text")
    parser.add_argument("--starts", default="scratch,random,encoding,fit,random+frequency,encoding+frequency,"
                                            "fit+frequency",
                        help="comma-separated starts to run: scratch, random, encoding, fit, and the last three "
                             "with +frequency (the words' log frequencies in the bias)")
    parser.add_argument("--learning_rate", type=float, help="override the learning rate of the domain runs")
    args = parser.parse_args(argv)
    domain_settings = dict(SETTINGS)  # the pretraining keeps SETTINGS as they are
    if args.learning_rate:
        domain_settings["learning_rate"] = args.learning_rate
    paths = write_corpora(args.work_dir, args.n_general, args.n_domain, args.n_heldout)
    print(f"Domain held-out tokens in the general vocabulary: {100 * _overlap(paths):.1f}%; vocabularies "
          f"{len(open(paths['general_vocab']).readlines())} (general) and "
          f"{len(open(paths['domain_vocab']).readlines())} (domain) words.")
    model_dir = pretrain(paths, args.work_dir, args.pretrain_steps, args.n_general)
    steps = args.domain_steps
    rows = []
    for start in args.starts.split(","):
        method, _, frequency = start.partition("+")
        warmups = [0] if method == "scratch" or frequency or not args.warmup_steps else [0, args.warmup_steps]
        for warmup in warmups:
            kwargs = {"overrides": {"softmax_warmup_steps": warmup}}
            if method != "scratch":
                kwargs.update(init_from=model_dir, softmax_init=method)
            training_run.initialize_softmax_of_state = functools.partial(
                softmax_init.initialize_softmax_of_state, frequency_bias=bool(frequency))
            options = domain_settings if method != "scratch" else {**ARCHITECTURE, **domain_settings}
            perplexities, seconds = run(paths, args.work_dir, f"{start}_{warmup}", steps, options, **kwargs)
            rows.append((start, warmup, perplexities))
            print(f"{start:>8} warm-up {warmup:>4}: " + "  ".join(f"{p:9.2f}" for p in perplexities)
                  + f"  ({seconds:.0f} s of training)", flush=True)
    print("\n| start | softmax warm-up steps | " + " | ".join(f"step {step}" for step in steps) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in steps) + " |")
    for start, warmup, perplexities in rows:
        print(f"| {start} | {warmup if start != 'scratch' else ''} | "
              + " | ".join(f"{p:,.2f}" for p in perplexities) + " |")
    return rows


if __name__ == "__main__":
    main()
