"""The flags of `bin/train_elmo.py` and `bin/restart.py`, and their closing line."""
from bilm.ops.matmul_dtype import MATMUL_DTYPES
from bilm.training.from_files import train_from_files


def add_training_arguments(parser):
    """The command-line flags of bin/train_elmo.py and bin/restart.py."""
    parser.add_argument("--train_prefix", required=True, help="glob of the training shards, e.g. 'data/train/*'")
    parser.add_argument("--vocab_file", required=True, help="vocabulary: <S>, </S>, <UNK>, then by frequency")
    parser.add_argument("--save_dir", required=True, help="checkpoints, options.json and logs/")
    parser.add_argument("--n_train_tokens", type=int, help="tokens per epoch (default: counted from the shards)")
    parser.add_argument("--n_epochs", type=int, help="epochs over the training data")
    parser.add_argument("--batch_size", type=int, help="rows per batch and per GPU")
    parser.add_argument("--matmul_dtype", choices=MATMUL_DTYPES,
                        help="bfloat16: the highway, LSTM input-half and softmax matmuls take bfloat16 "
                             "operands, faster where the hardware has bfloat16 matmuls (default: "
                             "float32, the original arithmetic; see bilm.ops.matmul_dtype)")
    parser.add_argument("--n_gpus", type=int, default=1, help="GPUs of this machine (TF_CONFIG for several machines)")
    parser.add_argument("--heldout_prefix", help="glob of held-out shards, evaluated during training")
    parser.add_argument("--heldout_every", type=int, help="also evaluate the held-out data every N steps")
    parser.add_argument("--checkpoint_every", type=int, default=1250, help="save every N steps (and each epoch)")
    parser.add_argument("--log_dir", help="TensorBoard summaries (default: SAVE_DIR/logs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation, shuffling and dropout")


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
    --options_file), in a process of its own: malloc tuned for training."""
    return train_from_files(
        args.train_prefix, args.vocab_file, args.save_dir, getattr(args, "options_file", None),
        restart=restart, n_train_tokens=args.n_train_tokens, n_epochs=args.n_epochs,
        batch_size=args.batch_size, matmul_dtype=args.matmul_dtype, n_gpus=args.n_gpus,
        heldout_prefix=args.heldout_prefix, heldout_every=args.heldout_every, checkpoint_every=args.checkpoint_every,
        log_dir=args.log_dir, seed=args.seed, tune_malloc=True)
