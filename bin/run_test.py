#!/usr/bin/env python
"""Held-out perplexity of the latest checkpoint in --save_dir (full softmax).

Ends with one line: AVERAGE PERPLEXITY = <number>.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads

from bilm.commands.training import test_from_files  # noqa: E402
from bilm.commands.user_errors import exit_on_user_error  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test_prefix", required=True, help="glob of the held-out shards")
    parser.add_argument("--vocab_file", required=True, help="the training vocabulary")
    parser.add_argument("--save_dir", required=True, help="the training directory")
    parser.add_argument("--batch_size", type=int, default=256, help="rows per batch")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        perplexity = test_from_files(args.test_prefix, args.vocab_file, args.save_dir, args.batch_size)
    print(f"AVERAGE PERPLEXITY = {perplexity:.4f}")
    return perplexity


if __name__ == "__main__":
    main()
