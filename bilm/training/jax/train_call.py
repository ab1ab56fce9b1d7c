"""`bilm.training.train` on JAX and PyTorch: bilm-tf's signature (`train(options, data, n_gpus, save_dir, log_dir,
restart_ckpt_file=None, ...)`) served by `train_on_jax`.

Needs Keras on JAX or PyTorch (`KERAS_BACKEND=jax` or `torch`).
"""
import os

from bilm.backend import training_ops
from bilm.errors import UserError
from bilm.options import load_options
from bilm.training.data.shards import count_tokens, report_token_count
from bilm.training.jax.adaptation import adapted_start
from bilm.training.jax.loop import train_on_jax
from bilm.training.model.adaptation import adaptation_options, open_model_to_adapt
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT, check_softmax_init
from bilm.training.run import run_checkpoint


def train(options, data, n_gpus, save_dir, log_dir, restart_ckpt_file=None, *, heldout_data=None, strategy=None,
          max_steps=None, checkpoint_every=1250, checkpoint_every_minutes=30, heldout_every=None,
          heldout_batch_size=None, summary_every=10, seed=0, data_source=None, max_to_keep=5, tune_malloc=False,
          save_on_signals=False, init_from=None, softmax_init=DEFAULT_SOFTMAX_INIT, verbose=1):
    """Trains (or continues) a biLM on JAX with `bilm.training.train`'s arguments and meaning.

    Args:
        options, data, heldout_data, seed, init_from, softmax_init,
            save_on_signals, verbose: as `train`'s (`init_from`: the run's
            options are the model's architecture with the training keys of
            `options`).
        n_gpus: JAX devices of its default kind to train on, `batch_size`
            rows each.
        save_dir: the run's directory (`options.json`, `checkpoint.npz`).
        log_dir, summary_every: TensorBoard's scalars, as `train`'s (None:
            none), in an event file written without TensorFlow.
        restart_ckpt_file: to continue a run: its checkpoint, which on JAX
            is the one in `save_dir` (`checkpoint.npz` or `save_dir`
            itself). None starts a new run, refused where `save_dir` holds
            a run's checkpoint.
        strategy: TensorFlow's; on JAX `n_gpus` devices share the batch
            (given: an error before any work).
        max_steps, checkpoint_every, checkpoint_every_minutes,
            heldout_every, heldout_batch_size, data_source, max_to_keep,
            tune_malloc: as `train`'s (`train_on_jax`).

    Returns:
        `train_on_jax`'s result dict, with `step` (the steps taken in all,
        as `train` returns it).
    """
    if strategy is not None:
        raise UserError("strategy is a tf.distribute.Strategy, for TensorFlow; on JAX, n_gpus devices share each "
                        "batch (leave strategy out).")
    meta = run_checkpoint.newest_meta(save_dir)
    checkpoint = run_checkpoint.checkpoint_path(save_dir) if meta is None else meta["path"]
    if restart_ckpt_file is not None:
        if init_from is not None:
            raise UserError("init_from starts a new run from a model; a restart continues its checkpoint.")
        if os.path.abspath(os.fspath(restart_ckpt_file)) not in (os.path.abspath(os.fspath(save_dir)),
                                                                os.path.abspath(checkpoint),
                                                                os.path.abspath(run_checkpoint.checkpoint_path(save_dir))):
            raise UserError(f"On JAX a run continues the checkpoint in its save_dir ({checkpoint}); "
                            f"restart_ckpt_file={os.fspath(restart_ckpt_file)!r} is elsewhere. Give save_dir the "
                            "run's directory.")
    restart = restart_ckpt_file is not None
    run_checkpoint.check_run_kind(save_dir, meta, restart)  # before any work; again under the run's lock
    start_state = None
    if init_from is not None:
        check_softmax_init(softmax_init)
        model = open_model_to_adapt(init_from)
        options = adaptation_options(model, options)
        start_state = adapted_start(model, data, softmax_init, verbose=verbose)
    options = _with_data_sizes(load_options(options), data, meta, verbose)
    result = train_on_jax(options, data, save_dir, seed=seed, max_steps=max_steps,
                          checkpoint_every=checkpoint_every, checkpoint_every_minutes=checkpoint_every_minutes,
                          heldout_data=heldout_data, heldout_every=heldout_every,
                          heldout_batch_size=heldout_batch_size, max_to_keep=max_to_keep, data_source=data_source,
                          tune_malloc=tune_malloc,
                          save_on_signals=save_on_signals, devices=training_ops().training_devices(n_gpus),
                          start_state=start_state,
                          restart=restart, log_dir=log_dir, summary_every=summary_every, verbose=verbose)
    return result


def _with_data_sizes(options, data, meta, verbose):
    """`options` with `n_tokens_vocab` (the data's vocabulary) and `n_train_tokens` (its shards' tokens, or a
    restart's) where they are left out, as `train` fills them."""
    keys = {}
    vocab = getattr(data, "vocab", None)
    if options.get("n_tokens_vocab") is None and vocab is not None:
        keys["n_tokens_vocab"] = vocab.size
    if options.get("n_train_tokens") is None:
        pattern = getattr(getattr(data, "forward", data), "filepattern", None)
        if meta is not None and meta["options"].get("n_train_tokens") is not None:
            keys["n_train_tokens"] = meta["options"]["n_train_tokens"]
        elif pattern is not None:
            keys["n_train_tokens"] = report_token_count(count_tokens(pattern), pattern, verbose)
    return options.updated(**keys) if keys else options
