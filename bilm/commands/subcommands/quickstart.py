"""Trains a tiny biLM on a generated corpus, evaluates it, dumps it, embeds with it."""
from bilm.commands import (
    ScriptArgumentParser,
    announce_devices,
    exit_on_user_error,
    exit_unless_training_backend,
    positive_int,
    set_numerics,
)


def main(argv=None, prog=None):
    exit_unless_training_backend("The quick start (bin/quickstart.py)")
    parser = ScriptArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--directory", default="bilm_quickstart",
                        help="Where everything is written (default: %(default)s): a new or empty directory, or "
                             "the quick start's own, where a rerun starts over and replaces only the files it "
                             "left there unchanged.")
    parser.add_argument("--n_epochs", type=positive_int, default=8, help="Epochs of training on the generated corpus "
                                                                 "(default: %(default)s).")
    args = parser.parse_args(argv)
    set_numerics(deterministic=True)  # float32 on a GPU too, and the same run each time
    announce_devices()
    from bilm.training import run_quickstart  # once the backend is checked

    with exit_on_user_error():
        result = run_quickstart(args.directory, n_epochs=args.n_epochs)
    print(f"held-out perplexity {result['heldout_perplexity']:.3f} "
          f"(unigram baseline {result['unigram_perplexity']:.1f})")
    print(f"with every sentence on its own, starting from zero states {result['zeros_start_perplexity']:.3f}, "
          f"from the boundary state {result['warm_start_perplexity']:.3f}")
    print(f"weights: {result['weight_file']}  options: {result['options_file']}")
    print(f"lm_embeddings of the example sentences (batch, n_layers + 1, time, 2P): "
          f"{result['lm_embeddings_shape']}")

