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

from bilm.commands.embedding_arguments import add_embedding_run_arguments
from bilm.commands.user_errors import exit_on_user_error  # noqa: E402
from bilm.export.sentence_embeddings import dump_bilm_embeddings  # noqa: E402


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
    add_embedding_run_arguments(parser, "OUTFILE")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        written = dump_bilm_embeddings(args.vocab_file, args.dataset_file, args.options_file, args.weight_file,
                                       args.outfile, batch_size=args.batch_size, resume=args.resume,
                                       overwrite=args.overwrite, start=args.start, warm_up=args.warm_up,
                                       matmul_dtype=args.matmul_dtype)
    print(f"Wrote {written} sentence datasets to {args.outfile} in this run.")


if __name__ == "__main__":
    main()
