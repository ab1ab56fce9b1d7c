"""Peak memory and time of saving a training run's checkpoint, on the backend Keras runs on.

Builds the training step of a released size (`ArrayTrainStep`: random
weights, the optimizer's state, `--batch_size` rows of LSTM states) with
`--n_tokens_vocab` words, then saves its state once as the run's checkpoint
every backend writes (`checkpoint.npz`, `bilm.training.run.run_checkpoint`),
and prints the state's size, the process's peak RSS before and after the
save (what the save added) and its seconds. Run each backend in a process of
its own, as the peak is the process's.

    python bench/bench_checkpoint_save.py --size small --n_tokens_vocab 793471
    KERAS_BACKEND=jax python bench/bench_checkpoint_save.py --size small --n_tokens_vocab 793471
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from machine import machine_line, peak_rss_gib  # noqa: E402


def main(argv=None):
    parser = harness.parser(__doc__, size="small", n_tokens_vocab=793471, batch_size=128, work_dir=None)
    parser.add_argument("--optimizer", default="adagrad")
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)

    import keras
    import numpy as np

    from bilm.presets import training_options
    from bilm.training.arrays.train_step import ArrayTrainStep
    from bilm.training.config.settings import training_settings
    from bilm.training.run import run_checkpoint

    options = dict(training_options(args.size), n_tokens_vocab=args.n_tokens_vocab, n_train_tokens=10 ** 9,
                   optimizer=args.optimizer, batch_size=args.batch_size)
    options, settings = training_settings(options)
    state = ArrayTrainStep(options, settings).initial_state()
    state_bytes = sum(int(np.prod(leaf.shape)) * 4 for leaf in keras.tree.flatten(state))  # float32 and int32
    backend = keras.backend.backend()
    with tempfile.TemporaryDirectory(prefix="bilm-bench-save-", dir=args.work_dir) as folder:
        before = peak_rss_gib()
        started = time.perf_counter()
        run_checkpoint.save_checkpoint(folder, state, 1, options.to_dict(), 0)
        seconds = time.perf_counter() - started
        after = peak_rss_gib()
    print(f"{args.size}, {args.n_tokens_vocab:,} words, {args.optimizer}, on {backend}: state "
          f"{state_bytes / 2 ** 30:.2f} GiB; peak RSS {before:.2f} GiB before the save, {after:.2f} GiB after "
          f"(+{after - before:.2f} GiB); save {seconds:.1f} s")
    return {"state_gib": state_bytes / 2 ** 30, "added_gib": after - before, "seconds": seconds}


if __name__ == "__main__":
    main()
