"""What `bin/train_elmo.py`, `bin/restart.py` and `bin/run_test.py` call: training from files."""
import os

from bilm.errors import UserError
from bilm.io.output_files import check_output_directory
from bilm.options import BiLMOptions, load_options
from bilm.presets import TRAINING_DEFAULTS, training_options
from bilm.training.data.lm_dataset import BidirectionalLMDataset, LMDataset, load_vocab
from bilm.training.data.shards import count_tokens
from bilm.training.data.vocabulary_order import warn_unless_frequency_order
from bilm.training.model.adaptation import adaptation_options, open_model_to_adapt
from bilm.training.model.softmax_init import DEFAULT_SOFTMAX_INIT, check_softmax_init
from bilm.training.run import checkpoints
from bilm.training.run.checkpoints import CheckpointError
from bilm.training.run.evaluation import test
from bilm.training.run.loop import train


def load_training_data(options, filepattern, vocab_file, test=False, seed=0):
    """`(data stream, vocabulary)` for `options` from shard files.

    Character ids when the options have `char_cnn`; both directions
    (`BidirectionalLMDataset`) when `bidirectional` (the default). Training
    streams shuffle with `seed`, so that a restart can skip what was read.
    """
    parsed = load_options(options)
    max_chars = parsed.char_cnn.max_characters_per_token if parsed.char_cnn is not None else None
    vocab = load_vocab(vocab_file, max_chars)
    bidirectional = parsed.get("bidirectional", TRAINING_DEFAULTS["bidirectional"])
    dataset = BidirectionalLMDataset if bidirectional else LMDataset
    return dataset(filepattern, vocab, test=test, shuffle_on_load=not test, seed=seed), vocab


def train_from_files(train_prefix, vocab_file, save_dir, options_file=None, *, size=None, restart=False,
                     n_train_tokens=None, n_epochs=None, batch_size=None, matmul_dtype=None, overrides=None,
                     n_gpus=1, heldout_prefix=None, log_dir=None, seed=0, init_from=None,
                     softmax_init=DEFAULT_SOFTMAX_INIT, **train_kwargs):
    """`bin/train_elmo.py` (and with `restart=True`, `bin/restart.py`).

    Options come from `options_file`, or the released size `size`
    (`"small"`, `"medium"`, `"original"`: `bilm.presets.training_options`),
    or on restart from `save_dir`. With `init_from`, a published model to
    adapt (see `train`), the architecture is the model's and the training
    keys come from `options_file` (which may repeat the architecture, not
    contradict it) or `bilm.presets.TRAINING_DEFAULTS`; the model is opened
    and checked before any work. `n_tokens_vocab` is the vocabulary's
    size; `n_epochs`, `batch_size`, `n_train_tokens`, `matmul_dtype` and
    the training keys in `overrides` (e.g. `{"dropout": 0.2}`) override
    them. Without `n_train_tokens` (flag or options) the tokens of the
    shards are counted; a restart on other data than before counts them
    anew. A `save_dir` this call created is removed again if it fails
    before writing anything into it.

    Returns:
        `train`'s result dict.
    """
    ckpt_file = None
    data_source = os.path.abspath(train_prefix)
    if init_from is not None:
        check_softmax_init(softmax_init)
        if restart:
            raise UserError("--init_from starts a new run from a model; a restart continues its checkpoint.")
        if size is not None:
            raise UserError("Give either a model to adapt (--init_from), whose architecture it keeps, or a size "
                            "(--size), not both.")
    if restart:
        ckpt_file = checkpoints.latest_checkpoint(save_dir)
    elif options_file is None and size is None and init_from is None:
        raise UserError("Give the model to train: an options file (--options_file) or a released size (--size "
                        "small, medium or original; small suits a CPU, the others want GPUs).")
    elif options_file is not None and size is not None:
        raise UserError("Give either an options file (--options_file) or a size (--size), not both.")
    created = not os.path.exists(save_dir)
    check_output_directory(save_dir)  # before any work
    try:
        model = None
        if init_from is not None:
            model = open_model_to_adapt(init_from)
            adaptation_options(model, options_file)  # a contradiction is an error before any work
            train_kwargs.update(init_from=model, softmax_init=softmax_init)
        keys = _merged_overrides(overrides, n_epochs=n_epochs, batch_size=batch_size, n_train_tokens=n_train_tokens,
                                 matmul_dtype=matmul_dtype)
        return _train_from_files(train_prefix, vocab_file, save_dir, options_file, size, restart, ckpt_file,
                                 data_source, keys, n_gpus, heldout_prefix, log_dir, seed, model, train_kwargs)
    except BaseException:
        if created and os.path.isdir(save_dir) and not os.listdir(save_dir):
            os.rmdir(save_dir)
        raise


def _merged_overrides(overrides, **keys):
    """The training keys to set: `overrides` and `keys`, leaving out those that are None."""
    merged = {key: value for key, value in (overrides or {}).items() if value is not None}
    merged.update({key: value for key, value in keys.items() if value is not None})
    return merged


def _train_from_files(train_prefix, vocab_file, save_dir, options_file, size, restart, ckpt_file, data_source,
                      overrides, n_gpus, heldout_prefix, log_dir, seed, model, train_kwargs):
    n_train_tokens = overrides.get("n_train_tokens")
    if restart:
        options = checkpoints.load_training_options(save_dir)
        same_data = checkpoints.read_state_summary(ckpt_file)["data_source"] == (
            checkpoints.data_fingerprint(data_source))
    elif model is not None:
        options = adaptation_options(model, options_file)
        same_data = True
    else:
        options = load_options(options_file) if options_file else BiLMOptions.from_dict(
            training_options(size), source=f"the {size} size's training options")
        same_data = True
    options = options.updated(**{key: value for key, value in overrides.items() if value is not None})
    data, vocab = load_training_data(options, train_prefix, vocab_file, seed=seed)
    if restart:
        if options.get("n_tokens_vocab") != vocab.size:
            raise CheckpointError(
                f"{vocab_file} has {vocab.size} tokens but the checkpoint in {save_dir} was trained with "
                f"n_tokens_vocab={options.get('n_tokens_vocab')}; restart with the training vocabulary.")
        checkpoints.check_vocabulary(ckpt_file, vocab)
    elif options.get("sample_softmax", TRAINING_DEFAULTS["sample_softmax"]):
        warn_unless_frequency_order(vocab, train_prefix)
    options = options.updated(n_tokens_vocab=vocab.size)
    if n_train_tokens is None and (not same_data or options.get("n_train_tokens") is None):
        options = options.updated(n_train_tokens=count_tokens(train_prefix))
        if train_kwargs.get("verbose", 1):
            print(f"Counted {options.get('n_train_tokens'):,} tokens in {train_prefix}.")
    heldout = None
    if heldout_prefix:
        heldout, _ = load_training_data(options, heldout_prefix, vocab_file, test=True)
    log_dir = log_dir or os.path.join(os.fspath(save_dir), "logs")
    return train(options, data, n_gpus, save_dir, log_dir, restart_ckpt_file=ckpt_file,
                 heldout_data=heldout, seed=seed, data_source=data_source, **train_kwargs)


def test_from_files(test_prefix, vocab_file, save_dir, batch_size=None, verbose=1, start="carry"):
    """`bin/run_test.py`: the average perplexity of `save_dir`'s latest
    checkpoint, each sentence starting as `start` says (see `evaluate`),
    with `batch_size` rows (default: the run's own `batch_size`, as the
    held-out evaluation during training, which it then equals)."""
    ckpt_file = checkpoints.latest_checkpoint(save_dir)
    options = checkpoints.load_training_options(save_dir)
    if batch_size is None:
        batch_size = options.get("batch_size", TRAINING_DEFAULTS["batch_size"])
    data, vocab = load_training_data(options, test_prefix, vocab_file, test=True)
    checkpoints.check_vocabulary(ckpt_file, vocab)
    return test(options, ckpt_file, data, batch_size=batch_size, verbose=verbose, start=start)
