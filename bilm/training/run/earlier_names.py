"""The array trainer's earlier names, kept working: `train_on_jax`, `train_from_files_on_jax` and
`evaluate_from_files_on_jax` are `train`, `train_from_files` and `evaluate_from_files`, which now train and
evaluate on every backend; each warns once per use, naming the new name."""
from bilm.training.run import run_directory
from bilm.training.run.from_files import evaluate_from_files, train_from_files
from bilm.training.run.loop import train
from bilm.utils.deprecation import warn_deprecated


def train_on_jax(options, data, save_dir, *, restart=None, devices=None, log_dir=None, **loop):
    """Deprecated: `train(options, data, n_gpus, save_dir, log_dir, restart_ckpt_file)` with `n_gpus` the number
    of `devices` (the default kind's first ones), continuing the run in `save_dir` where `restart` is True, or
    None and `save_dir` holds one; `loop` are `train`'s keyword arguments."""
    warn_deprecated("bilm.training.train_on_jax is deprecated; use bilm.training.train(options, data, n_gpus, "
                    "save_dir, log_dir, restart_ckpt_file=...), which trains on every backend.")
    if restart is None:
        restart = run_directory.newest_meta(save_dir) is not None
    return train(options, data, len(devices) if devices else 1, save_dir, log_dir,
                 restart_ckpt_file=save_dir if restart else None, **loop)


def train_from_files_on_jax(*args, **kwargs):
    """Deprecated: `train_from_files` (the same arguments)."""
    warn_deprecated("bilm.training.train_from_files_on_jax is deprecated; use bilm.training.train_from_files "
                    "(the same arguments), which trains on every backend.")
    return train_from_files(*args, **kwargs)


def evaluate_from_files_on_jax(*args, **kwargs):
    """Deprecated: `evaluate_from_files` (the same arguments)."""
    warn_deprecated("bilm.training.evaluate_from_files_on_jax is deprecated; use bilm.training.evaluate_from_files "
                    "(the same arguments), which evaluates on every backend.")
    return evaluate_from_files(*args, **kwargs)
