"""What `bin/train_elmo.py`, `bin/restart.py` and `bin/run_test.py` call, on every backend: training from files."""
import os
import warnings

from bilm.backend import trainer_module
from bilm.io.formats.output_files import check_output_directory
from bilm.options import BiLMOptions, load_options
from bilm.options.keys import option_key
from bilm.presets import training_options
from bilm.training.config.model_choice import check_model_choice
from bilm.training.config.training_config import resolve_training_config
from bilm.training.data.lm_dataset import load_training_data
from bilm.training.data.vocabulary_order import warn_unless_frequency_order
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT
from bilm.training.run import run_directory
from bilm.training.run.evaluation_starts import checked_starts
from bilm.training.run.loop import run_training
from bilm.training.run.loop_settings import LoopSettings
from bilm.training.run.run_origin import run_origin


def train_from_files(train_prefix, vocab_file, save_dir, options_file=None, *, size=None, restart=False,
                     n_train_tokens=None, n_epochs=None, batch_size=None, matmul_dtype=None, overrides=None,
                     n_gpus=1, heldout_prefix=None, log_dir=None, seed=0, init_from=None,
                     softmax_init=DEFAULT_SOFTMAX_INIT, **train_kwargs):
    """`bin/train_elmo.py` (and with `restart=True`, `bin/restart.py`).

    Options come from `options_file`, or the released size `size`
    (`"small"`, `"medium"`, `"original"`: `bilm.presets.training_options`),
    or on restart from `save_dir`'s newest checkpoint, which the run
    continues exactly. With `init_from`, a published model to
    adapt (see `train`), the architecture is the model's and the training
    keys come from `options_file` (which may repeat the architecture, not
    contradict it) or their defaults; the model is opened and checked
    before any work. `n_tokens_vocab` is the vocabulary's size;
    `n_epochs`, `batch_size`, `n_train_tokens`, `matmul_dtype` and the
    training keys in `overrides` (e.g. `{"dropout": 0.2}`) override them.
    Without `n_train_tokens` (flag or options) the tokens of the shards are
    counted; a restart on other data than before counts them anew. A
    `save_dir` this call created is removed again if it fails before
    writing anything into it. The rest of `train_kwargs` are `train`'s
    loop settings (`max_steps`, `checkpoint_every`, ..., `verbose`: the
    fields of `bilm.training.run.loop_settings.LoopSettings`, with `seed`)
    and its `strategy`.

    Returns:
        `train`'s result dict.
    """
    check_model_choice(restart, options_file, size, init_from)
    strategy = train_kwargs.pop("strategy", None)
    loop_settings = LoopSettings(seed=seed, **train_kwargs)
    meta = run_directory.run_meta(save_dir) if restart else None  # a restart creates nothing
    created = not os.path.exists(save_dir)
    check_output_directory(save_dir)  # before any work
    try:
        origin = run_origin(meta and meta["path"], init_from, softmax_init)
        keys = _merged_overrides(overrides, n_epochs=n_epochs, batch_size=batch_size, matmul_dtype=matmul_dtype)
        if restart:
            options = origin.options(meta["options"])
        elif size is not None:
            options = origin.options(BiLMOptions.from_dict(training_options(size),
                                                          source=f"the {size} size's training options"))
        else:
            options = origin.options(options_file)  # an adapted model's contradictions: an error before any work
        options = options.updated(**keys)
        data, vocab = load_training_data(options, train_prefix, vocab_file, seed=seed)
        if origin.checkpoint is None and options.get("sample_softmax", option_key("sample_softmax").default):
            warn_unless_frequency_order(vocab, train_prefix)
        if origin.checkpoint is None:
            options = options.updated(n_tokens_vocab=vocab.size)
        config = resolve_training_config(options, data, origin, vocabulary=vocab, n_train_tokens=n_train_tokens,
                                         verbose=loop_settings.verbose)
        heldout = load_training_data(options, heldout_prefix, vocab_file, test=True)[0] if heldout_prefix else None
        log_dir = log_dir or os.path.join(os.fspath(save_dir), "logs")
        return run_training(config, data, n_gpus, save_dir, log_dir, loop_settings, heldout_data=heldout,
                            strategy=strategy)
    except BaseException:
        if created and os.path.isdir(save_dir) and not os.listdir(save_dir):
            os.rmdir(save_dir)
        raise


def _merged_overrides(overrides, **keys):
    """The training keys to set: `overrides` and `keys`, leaving out those that are None."""
    merged = {key: value for key, value in (overrides or {}).items() if value is not None}
    merged.update({key: value for key, value in keys.items() if value is not None})
    return merged


def evaluate_from_files(test_prefix, vocab_file, save_dir, batch_size=None, verbose=1, start="carry"):
    """`bin/run_test.py`: the average perplexity of `save_dir`'s newest checkpoint (of any backend, or an
    earlier run's: `run_directory.newest_meta`), each sentence starting as `start` says (see `evaluate_state`;
    `"warm"` with a checkpoint that holds no boundary state measures one on the evaluation text), with
    `batch_size` rows (default: the run's own `batch_size`, as the held-out evaluation during training, which
    it then equals).

    `start` may also be a list or tuple of starts: then the checkpoint is read and the model built once for all of
    them, and the result is `{start: average perplexity}`, each the figure that start gives alone."""
    starts = checked_starts(start, 1)
    meta = run_directory.run_meta(save_dir)
    options = load_options(meta["options"])
    if batch_size is None:
        batch_size = options.get("batch_size", option_key("batch_size").default)
    data, vocab = load_training_data(options, test_prefix, vocab_file, test=True)
    run_directory.check_vocabulary(meta, vocab)
    return trainer_module().evaluate_checkpoint(meta, options, data, batch_size, verbose,
                                                starts if isinstance(start, (list, tuple)) else start)


def test_from_files(test_prefix, vocab_file, save_dir, batch_size=None, verbose=1, start="carry"):
    """Deprecated: `evaluate_from_files` (a name pytest collects as a test where it is imported)."""
    warnings.warn("bilm.training.test_from_files is deprecated; use bilm.training.evaluate_from_files (same "
                  "arguments).", DeprecationWarning, stacklevel=2)
    return evaluate_from_files(test_prefix, vocab_file, save_dir, batch_size, verbose, start)


test_from_files.__test__ = False  # not a test of pytest's, wherever it is imported
