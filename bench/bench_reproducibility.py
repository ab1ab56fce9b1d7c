"""Two training runs with the same --seed on real text: do they end with the same weights?

Trains twice with `bin/train_elmo.py` (a 2x128 model projected to 32, 1,024
negatives, batches of 32 x 20) on GCIDE's prose (`real_text.py`: Debian's
dict-gcide, installed when missing), then compares every variable of the
two last checkpoints and prints the largest difference per kind and the
held-out perplexities. Everything is written under --work_dir.

    python bench/bench_reproducibility.py --work_dir /tmp/bench_repro --batches 100
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from real_text import write_gcide_shards  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _options(path):
    import bilm.presets

    options = bilm.presets.training_options("small", batch_size=32, unroll_steps=20, n_negative_samples_batch=1024,
                                            n_epochs=1)
    options["lstm"].update(dim=128, projection_dim=32)
    with open(path, "w") as f:
        json.dump(options, f)


def _train(work_dir, text, name, batches, seed):
    save_dir = os.path.join(work_dir, name)
    if os.path.exists(save_dir):
        subprocess.run(["rm", "-r", save_dir], check=True)
    command = [sys.executable, os.path.join(ROOT, "bin", "train_elmo.py"), "--train_prefix", text["train"],
               "--vocab_file", os.path.join(work_dir, "vocab.txt"), "--save_dir", save_dir,
               "--options_file", os.path.join(work_dir, "options.json"), "--n_train_tokens", str(batches * 640),
               "--seed", str(seed), "--heldout_prefix", text["heldout"]]
    result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if result.returncode != 0:
        sys.exit(result.stderr[-3000:])
    perplexity = re.findall(r"held-out perplexity ([0-9.]+)", result.stdout + result.stderr)
    return save_dir, float(perplexity[-1])


def _arrays(save_dir):
    from bilm.training.run import run_checkpoint

    return run_checkpoint.read_arrays(run_checkpoint.read_meta(save_dir)["path"])


def main():
    parser = harness.parser(__doc__, work_dir=harness.REQUIRED, seed=0)
    parser.add_argument("--batches", type=int, default=100)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    text = write_gcide_shards(os.path.join(args.work_dir, "text"), 400_000, 20_000, n_shards=10)
    vocab = os.path.join(args.work_dir, "vocab.txt")
    if not os.path.exists(vocab):
        subprocess.run([sys.executable, os.path.join(ROOT, "bin", "build_vocab.py"), "--train_prefix", text["train"],
                        "--vocab_file", vocab], check=True)
    _options(os.path.join(args.work_dir, "options.json"))
    runs = [_train(args.work_dir, text, name, args.batches, args.seed) for name in ("run_a", "run_b")]
    first, second = (_arrays(save_dir) for save_dir, _ in runs)
    worst = {}
    for name, value in first.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
            kind = name.split("/")[0]
            worst[kind] = max(worst.get(kind, 0.0), float(np.abs(value - second[name]).max()))
    print(f"{args.batches} batches of 32 x 20, seed {args.seed}: held-out perplexity {runs[0][1]} and {runs[1][1]}")
    for kind, difference in sorted(worst.items()):
        print(f"  largest difference in {kind}: {difference:.3g}")
    same = all(difference == 0 for difference in worst.values())
    print("the two runs are identical, bit for bit" if same else "the two runs differ")


if __name__ == "__main__":
    main()
