"""Peak memory and time of saving a training run's checkpoint on TensorFlow.

Builds a training model of a released size (random weights, the optimizer's
state, `--batch_size` rows of LSTM states) with `--n_tokens_vocab` words,
then saves it once, as the run's checkpoint every backend writes
(`--format run`: `checkpoint.npz`, `bilm.training.run.run_checkpoint`) or
as TensorFlow's checkpoint of earlier versions (`--format tensorflow`:
`tf.train.CheckpointManager`), and prints the state's size, the process's
peak RSS before and after the save (what the save added) and its seconds.
Run each format in a process of its own, as the peak is the process's.

    python bench/bench_checkpoint_save.py --size small --n_tokens_vocab 793471 --format run
    python bench/bench_checkpoint_save.py --size small --n_tokens_vocab 793471 --format tensorflow
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
    parser.add_argument("--format", choices=("run", "tensorflow"), default="run")
    args = parser.parse_args(argv)
    print(machine_line(), flush=True)

    import tensorflow as tf

    from bilm.optimizers import make_optimizer
    from bilm.presets import training_options
    from bilm.training.config.settings import training_settings
    from bilm.training.run import run_checkpoint
    from bilm.training.tensorflow import checkpoints
    from bilm.training.tensorflow.training_lm import TrainingLM

    options = dict(training_options(args.size), n_tokens_vocab=args.n_tokens_vocab, n_train_tokens=10 ** 9,
                   optimizer=args.optimizer)
    options, settings = training_settings(options)
    lm = TrainingLM(options, settings)
    optimizer = make_optimizer(settings, lm.trainable_variables())
    lstm = {key: tf.Variable(tf.zeros([args.batch_size, size])) for key, _, size in lm.state_keys}
    state_bytes = sum(variable.shape.num_elements() * variable.dtype.size
                      for variable in checkpoints._state_objects(lm, optimizer, lstm)[1].values())
    with tempfile.TemporaryDirectory(prefix="bilm-bench-save-", dir=args.work_dir) as folder:
        before = peak_rss_gib()
        started = time.perf_counter()
        if args.format == "run":
            run_checkpoint.save_checkpoint(folder, checkpoints.training_arrays(lm, optimizer, lstm), 1,
                                           options.to_dict(), 0)
        else:
            step = tf.Variable(1, dtype=tf.int64)
            tf.train.CheckpointManager(checkpoints.build_checkpoint(lm, optimizer, step, lstm), folder, 1,
                                       checkpoint_name="model.ckpt").save(checkpoint_number=1)
        seconds = time.perf_counter() - started
        after = peak_rss_gib()
    print(f"{args.size}, {args.n_tokens_vocab:,} words, {args.optimizer}, format {args.format}: state "
          f"{state_bytes / 2 ** 30:.2f} GiB; peak RSS {before:.2f} GiB before the save, {after:.2f} GiB after "
          f"(+{after - before:.2f} GiB); save {seconds:.1f} s")
    return {"state_gib": state_bytes / 2 ** 30, "added_gib": after - before, "seconds": seconds}


if __name__ == "__main__":
    main()
