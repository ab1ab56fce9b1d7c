#!/usr/bin/env python
"""Writes every sentence's biLM layers (n_layers + 1, n_tokens, 2P) to an HDF5 file.

One dataset per line, named by line number (bilm-tf's dump layout). The
output is never one of the inputs, and an existing file is only replaced if
bilm wrote it as an embedding file (or with --overwrite). An interrupted run
leaves OUTFILE.partial; rerunning the same command continues it.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads

from bilm.commands.sentence_embeddings import dump_bilm_embeddings  # noqa: E402
from bilm.commands.user_errors import exit_on_user_error  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab_file", default=None,
                        help="Optional vocabulary (a cache of character ids).")
    parser.add_argument("--dataset_file", required=True,
                        help="One whitespace-tokenized sentence per line.")
    parser.add_argument("--options_file", required=True)
    parser.add_argument("--weight_file", required=True)
    parser.add_argument("--outfile", required=True,
                        help="HDF5 output, one dataset per line (its directory is created if missing).")
    parser.add_argument("--batch_size", type=int,
                        help="Sentences per model call (default: calls of about 4,096 tokens, sentences "
                             "batched by length).")
    parser.add_argument("--no_resume", dest="resume", action="store_false",
                        help="Start over instead of continuing OUTFILE.partial from an interrupted run.")
    parser.add_argument("--start", choices=("warm", "zeros"),
                        help="where each sentence's LSTMs start: warm, the boundary state (the mean state at "
                             "sentence starts in training, stored by bilm's training or made by --warm_up), or "
                             "zeros (default: warm when there is a boundary state, else zeros)")
    parser.add_argument("--warm_up", metavar="FILE",
                        help="compute the boundary state from the first 1,000 sentences of this text file "
                             "(one per line), for weights that carry none, such as the published ones")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an existing OUTFILE (or OUTFILE.partial) that bilm did not write.")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        written = dump_bilm_embeddings(args.vocab_file, args.dataset_file, args.options_file, args.weight_file,
                                       args.outfile, batch_size=args.batch_size, resume=args.resume,
                                       overwrite=args.overwrite, start=args.start, warm_up=args.warm_up)
    print(f"Wrote {written} sentence datasets to {args.outfile} in this run.")


if __name__ == "__main__":
    main()
