#!/usr/bin/env python
"""Writes the char-CNN embedding of every vocabulary token to an HDF5 file."""
import argparse

from bilm.commands.user_errors import exit_on_user_error
from bilm.commands.dump import dump_token_embeddings


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab_file", required=True, help="One token per line.")
    parser.add_argument("--options_file", required=True)
    parser.add_argument("--weight_file", required=True)
    parser.add_argument("--outfile", required=True, help="HDF5 output with dataset 'embedding'.")
    parser.add_argument("--batch_size", type=int, default=512, help="Tokens per model call.")
    args = parser.parse_args()
    with exit_on_user_error():
        dump_token_embeddings(args.vocab_file, args.options_file, args.weight_file, args.outfile,
                              batch_size=args.batch_size)


if __name__ == "__main__":
    main()
