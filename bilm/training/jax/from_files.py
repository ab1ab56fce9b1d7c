"""What `bin/train_elmo.py` and `bin/restart.py` run on JAX and PyTorch: training from files, with the TensorFlow
path's options, sizes, vocabulary, shards and flags (`bilm.training.run.from_files.train_from_files`).

Needs Keras on JAX or PyTorch (`KERAS_BACKEND=jax` or `torch`).
"""
import os

from bilm.backend import training_ops
from bilm.errors import UserError
from bilm.options import BiLMOptions, load_options
from bilm.presets import training_options
from bilm.training.config.model_choice import check_model_choice
from bilm.training.config.training_config import data_fingerprint
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.data.shards import count_tokens, report_token_count
from bilm.training.jax.adaptation import adapted_start
from bilm.training.jax.loop import train_on_jax
from bilm.training.model.adaptation import adaptation_options, open_model_to_adapt
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT, check_softmax_init
from bilm.training.run import run_checkpoint


def train_from_files_on_jax(train_prefix, vocab_file, save_dir, options_file=None, *, size=None, restart=False,
                            n_train_tokens=None, n_epochs=None, batch_size=None, matmul_dtype=None,
                            overrides=None, n_gpus=1, heldout_prefix=None, seed=0, init_from=None,
                            softmax_init=None, max_steps=None, checkpoint_every=1250, checkpoint_every_minutes=30,
                            heldout_every=None, heldout_batch_size=None, max_to_keep=5, tune_malloc=False,
                            save_on_signals=True, log_dir=None, summary_every=10, verbose=1, strategy=None):
    """`train_from_files` on JAX: the same arguments, with the same meaning (`strategy`, TensorFlow's, is
    refused).

    Options come from `options_file`, or the released size `size`, or on
    restart from `save_dir` (whose checkpoint the run continues exactly).
    With `init_from`, a published model to adapt (opened and checked before
    any work), the architecture is the model's and the training keys come
    from `options_file` (which may repeat the architecture, not contradict
    it) or their defaults; the run starts from its weights with a new
    softmax (`softmax_init`, default `"fit"`; `bilm.training.jax.adaptation`).
    `n_tokens_vocab` is the vocabulary's size; `n_epochs`, `batch_size`,
    `n_train_tokens`, `matmul_dtype` and the training keys in `overrides`
    override the options'. `n_gpus` devices of JAX's first kind train, with
    `batch_size` rows each (`JaxTrainStep`). TensorBoard's scalars go to
    `log_dir` (default `save_dir/logs`, as on TensorFlow).

    A new run (`restart=False`) refuses a `save_dir` that holds a checkpoint, as
    TensorFlow's does. `max_steps` is this call's steps (as `train_from_files`'): a restart
    takes at most that many more.

    Returns:
        `train_on_jax`'s result, with the keys `train`'s result has that the
        scripts read (`step`, `steps_taken`, `finished`, `n_epochs`).
    """
    if strategy is not None:
        raise UserError("strategy is a tf.distribute.Strategy, for TensorFlow; on JAX, n_gpus devices share each "
                        "batch (leave strategy out).")
    check_model_choice(restart, options_file, size, init_from)
    meta = run_checkpoint.newest_meta(save_dir)
    run_checkpoint.check_run_kind(save_dir, meta, bool(restart))  # before any work; again under the run's lock
    model = None
    if init_from is not None:
        softmax_init = check_softmax_init(DEFAULT_SOFTMAX_INIT if softmax_init is None else softmax_init)
        model = open_model_to_adapt(init_from)
    if meta is not None:
        options = load_options(meta["options"])
    elif model is not None:
        options = adaptation_options(model, options_file)  # contradictions: an error before any work
    elif size is not None:
        options = BiLMOptions.from_dict(training_options(size), source=f"the {size} size's training options")
    else:
        options = load_options(options_file)
    keys = {key: value for key, value in (overrides or {}).items() if value is not None}
    keys.update({key: value for key, value in (("n_epochs", n_epochs), ("batch_size", batch_size),
                                                ("matmul_dtype", matmul_dtype)) if value is not None})
    options = options.updated(**keys)
    data, vocab = load_training_data(options, train_prefix, vocab_file, seed=seed)
    if meta is None:
        options = options.updated(n_tokens_vocab=vocab.size)
    else:
        run_checkpoint.check_vocabulary(meta, vocab)
    # As TensorFlow's: counted where not given, and anew where a restart reads other data than its checkpoint.
    data_source = os.path.abspath(train_prefix)
    other_data = meta is not None and meta["data_source"] not in (None, data_fingerprint(data_source))
    if n_train_tokens is not None:
        options = options.updated(n_train_tokens=n_train_tokens)
    elif options.get("n_train_tokens") is None or other_data:
        options = options.updated(n_train_tokens=report_token_count(count_tokens(train_prefix), train_prefix, verbose))
    devices = training_ops().training_devices(n_gpus)
    heldout = load_training_data(options, heldout_prefix, vocab_file, test=True)[0] if heldout_prefix else None
    start_state = adapted_start(model, data, softmax_init, verbose=verbose) if model is not None else None
    result = train_on_jax(options, data, save_dir, seed=seed, max_steps=max_steps,
                          checkpoint_every=checkpoint_every, checkpoint_every_minutes=checkpoint_every_minutes,
                          heldout_data=heldout, heldout_every=heldout_every, heldout_batch_size=heldout_batch_size,
                          max_to_keep=max_to_keep, data_source=data_source,
                          tune_malloc=tune_malloc, save_on_signals=save_on_signals,
                          devices=devices, start_state=start_state, restart=bool(restart),
                          log_dir=log_dir or os.path.join(os.fspath(save_dir), "logs"), summary_every=summary_every,
                          verbose=verbose)
    return result

