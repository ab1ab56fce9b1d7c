"""What `bin/train_elmo.py`, `bin/restart.py` and `bin/run_test.py` call: training from files."""
import argparse
import os
import shlex

from bilm.io.output_files import check_output_directory
from bilm.ops.matmul_dtype import MATMUL_DTYPES
from bilm.options import BiLMOptions, load_options
from bilm.presets import TRAINING_DEFAULTS, training_options
from bilm.training import checkpoints
from bilm.training.checkpoints import CheckpointError
from bilm.training.evaluation import test
from bilm.training.loop import TrainingInterrupted, train
from bilm.training.shards import count_tokens
from bilm.training.windows import BidirectionalLMDataset, LMDataset, load_vocab


def default_training_options(n_tokens_vocab=None):
    """bilm-tf's original configuration for training.

    2x4096_512_2048cnn_2xhighway, bidirectional, dropout 0.1, clip 10,
    10 epochs of batches of 128 x 20, 8192 negative samples, and the
    training character table (`n_characters` 261).
    """
    keys = {} if n_tokens_vocab is None else {"n_tokens_vocab": int(n_tokens_vocab)}
    return training_options("original", **keys)


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


def train_from_files(train_prefix, vocab_file, save_dir, options_file=None, *, restart=False,
                     n_train_tokens=None, n_epochs=None, batch_size=None, matmul_dtype=None, n_gpus=1,
                     heldout_prefix=None, log_dir=None, seed=0, **train_kwargs):
    """`bin/train_elmo.py` (and with `restart=True`, `bin/restart.py`).

    Options come from `options_file`, or `default_training_options()`, or
    on restart from `save_dir`; `n_tokens_vocab` is the vocabulary's size;
    `n_epochs`, `batch_size`, `n_train_tokens` and `matmul_dtype` override them. Without
    `n_train_tokens` (flag or options) the tokens of the shards are
    counted; a restart on other data than before counts them anew.

    Returns:
        `train`'s result dict.
    """
    ckpt_file = None
    data_source = os.path.abspath(train_prefix)
    if restart:
        ckpt_file = checkpoints.latest_checkpoint(save_dir)
    check_output_directory(save_dir)  # before any work
    if restart:
        options = checkpoints.load_training_options(save_dir)
        same_data = checkpoints.read_state_summary(ckpt_file)["data_source"] == (
            checkpoints.data_fingerprint(data_source))
    else:
        options = load_options(options_file) if options_file else BiLMOptions.from_dict(
            default_training_options(), source="the default training options")
        same_data = True
    overrides = {"n_epochs": n_epochs, "batch_size": batch_size, "n_train_tokens": n_train_tokens,
                 "matmul_dtype": matmul_dtype}
    options = options.updated(**{key: value for key, value in overrides.items() if value is not None})
    data, vocab = load_training_data(options, train_prefix, vocab_file, seed=seed)
    if restart and options.get("n_tokens_vocab") != vocab.size:
        raise CheckpointError(
            f"{vocab_file} has {vocab.size} tokens but the checkpoint in {save_dir} was trained with "
            f"n_tokens_vocab={options.get('n_tokens_vocab')}; restart with the training vocabulary.")
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


def test_from_files(test_prefix, vocab_file, save_dir, batch_size=256, verbose=1, start="carry"):
    """`bin/run_test.py`: the average perplexity of `save_dir`'s latest
    checkpoint, each sentence starting as `start` says (see `evaluate`)."""
    ckpt_file = checkpoints.latest_checkpoint(save_dir)
    options = checkpoints.load_training_options(save_dir)
    data, _ = load_training_data(options, test_prefix, vocab_file, test=True)
    return test(options, ckpt_file, data, batch_size=batch_size, verbose=verbose, start=start)


def add_training_arguments(parser):
    """Adds the command-line flags of bin/train_elmo.py and bin/restart.py; returns their `argparse.Action`s."""
    return [
        parser.add_argument("--train_prefix", required=True,
                            help="glob of the training shards, e.g. 'data/train/*'"),
        parser.add_argument("--vocab_file", required=True, help="vocabulary: <S>, </S>, <UNK>, then by frequency"),
        parser.add_argument("--save_dir", required=True, help="checkpoints, options.json and logs/"),
        parser.add_argument("--n_train_tokens", type=int,
                            help="tokens per epoch (default: counted from the shards)"),
        parser.add_argument("--n_epochs", type=int, help="epochs over the training data"),
        parser.add_argument("--batch_size", type=int, help="rows per batch and per GPU"),
        parser.add_argument("--matmul_dtype", choices=MATMUL_DTYPES,
                            help="bfloat16: the highway, LSTM input-half and softmax matmuls take bfloat16 "
                                 "operands, faster where the hardware has bfloat16 matmuls (default: "
                                 "float32, the original arithmetic; see bilm.ops.matmul_dtype)"),
        parser.add_argument("--n_gpus", type=int, default=1,
                            help="GPUs of this machine (TF_CONFIG for several machines) (default: %(default)s)"),
        parser.add_argument("--heldout_prefix", help="glob of held-out shards, evaluated during training"),
        parser.add_argument("--heldout_every", type=int, help="also evaluate the held-out data every N steps"),
        parser.add_argument("--checkpoint_every", type=int, default=1250, metavar="N",
                            help="save every N steps, at each epoch's end, and on Ctrl-C (SIGINT) or SIGTERM "
                                 "before exiting (default: %(default)s)"),
        parser.add_argument("--checkpoint_every_minutes", type=float, default=30, metavar="M",
                            help="also save at least every M minutes (default: %(default)s)"),
        parser.add_argument("--log_dir", help="TensorBoard summaries (default: SAVE_DIR/logs)"),
        parser.add_argument("--seed", type=int, default=0,
                            help="seed of initialisation, shuffling and dropout (default: %(default)s)"),
    ]


def restart_command(args):
    """The `bin/restart.py` command line that continues the run of `args` (the flags of
    `add_training_arguments`): each of those flags whose value is not its default."""
    words = ["python", "bin/restart.py"]
    for action in add_training_arguments(argparse.ArgumentParser()):
        value = getattr(args, action.dest, None)
        if value is not None and value != action.default:
            words += [action.option_strings[0], str(value)]
    return shlex.join(words)


def describe_result(result, save_dir):
    """The closing line of bin/train_elmo.py and bin/restart.py for `train`'s result."""
    if result["steps_taken"] == 0 and result["finished"]:
        n_epochs = result["n_epochs"]
        return (f"Nothing to train: the run in {save_dir} has finished its {n_epochs} epoch(s) (step "
                f"{result['step']}). To train longer on the same data, rerun bin/restart.py with a larger "
                f"--n_epochs (e.g. --n_epochs {2 * n_epochs}); to fine-tune on other text, pass its shards "
                "as --train_prefix.")
    return f"Finished at step {result['step']}: {result['checkpoint']}"


def train_from_args(args, restart=False):
    """`train_from_files` with the flags of `add_training_arguments` (and
    --options_file), in a process of its own: malloc tuned for training,
    SIGINT and SIGTERM saving the step reached (`TrainingInterrupted`, its
    message naming the `restart_command` that continues)."""
    try:
        return train_from_files(
            args.train_prefix, args.vocab_file, args.save_dir, getattr(args, "options_file", None),
            restart=restart, n_train_tokens=args.n_train_tokens, n_epochs=args.n_epochs,
            batch_size=args.batch_size, matmul_dtype=args.matmul_dtype, n_gpus=args.n_gpus,
            heldout_prefix=args.heldout_prefix, heldout_every=args.heldout_every,
            checkpoint_every=args.checkpoint_every, checkpoint_every_minutes=args.checkpoint_every_minutes,
            log_dir=args.log_dir, seed=args.seed, tune_malloc=True, save_on_signals=True)
    except TrainingInterrupted as interrupted:
        raise TrainingInterrupted(interrupted.signal, interrupted.step, interrupted.checkpoint,
                                  by_peer=interrupted.by_peer, continue_with=restart_command(args)) from None
