"""Held-out perplexity of the latest checkpoint in --save_dir (full softmax).

The checkpoint is the run's (checkpoint.npz), written on any backend, or an
earlier run's; it is evaluated on Keras's backend (KERAS_BACKEND).

Ends with one line: AVERAGE PERPLEXITY = <number>.
"""
from bilm.commands import (
    ScriptArgumentParser,
    add_tf32_argument,
    announce_devices,
    exit_on_user_error,
    exit_unless_training_backend,
    positive_int,
    set_numerics,
)
from bilm.training import EVALUATION_STARTS


def main(argv=None, prog=None):
    exit_unless_training_backend("Evaluating a checkpoint (bin/run_test.py)")
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--test_prefix", required=True, help="glob of the held-out shards")
    parser.add_argument("--vocab_file", required=True, help="the training vocabulary")
    parser.add_argument("--save_dir", required=True, help="the training directory")
    parser.add_argument("--batch_size", type=positive_int,
                        help="rows per batch (default: the run's own batch_size, so that the figure equals the "
                             "held-out perplexity training printed; each row carries its state from sentence to "
                             "sentence, so the figure depends a little on the rows)")
    parser.add_argument("--start", choices=EVALUATION_STARTS, default="carry",
                        help="where each sentence's LSTMs start: carry (the state the previous sentence left, as "
                             "in training and bilm-tf), zeros, or warm (the boundary state, as embedding starts "
                             "each sentence); comparing them shows what each start costs on your text")
    add_tf32_argument(parser)
    args = parser.parse_args(argv)
    set_numerics(tf32=args.tf32)  # float32, as training computed its held-out perplexity, unless --tf32
    announce_devices()
    # The array trainer's on JAX and PyTorch; imported once the backend is checked.
    from bilm.training import evaluate_from_files

    with exit_on_user_error():
        perplexity = evaluate_from_files(args.test_prefix, args.vocab_file, args.save_dir, args.batch_size,
                                         start=args.start)
    print(f"AVERAGE PERPLEXITY = {perplexity:.4f}")
    return perplexity

