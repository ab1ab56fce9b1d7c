#!/usr/bin/env python
"""Writes every sentence's biLM layers (n_layers + 1, n_tokens, 2P) to an HDF5 file."""
import argparse

from bilm.commands.user_errors import exit_on_user_error
from bilm.commands.dump import dump_bilm_embeddings


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab_file", default=None,
                        help="Optional vocabulary (a cache of character ids).")
    parser.add_argument("--dataset_file", required=True,
                        help="One whitespace-tokenized sentence per line.")
    parser.add_argument("--options_file", required=True)
    parser.add_argument("--weight_file", required=True)
    parser.add_argument("--outfile", required=True, help="HDF5 output, one dataset per line.")
    parser.add_argument("--batch_size", type=int, default=64, help="Sentences per model call.")
    args = parser.parse_args()
    with exit_on_user_error():
        dump_bilm_embeddings(args.vocab_file, args.dataset_file, args.options_file, args.weight_file,
                             args.outfile, batch_size=args.batch_size)


if __name__ == "__main__":
    main()
