#!/usr/bin/env python
"""Trains a biLM on your own corpus (bilm-tf's bin/train_elmo.py).

The model is --options_file (the model and training keys, see
docs/formats.md) or a released size, --size: small (2x1024_128, suits a
CPU), medium (2x2048_256) or original (2x4096_512, the published ELMo; wants
GPUs), trained with the original recipe (10 epochs, batch 128 x 20, 8192
negatives, Adagrad 0.2, dropout 0.1). The flags below override single
training keys.

Ctrl-C (SIGINT) or SIGTERM finishes the step in progress, saves it and exits
(status 130 or 143) with the bin/restart.py command that continues exactly;
a second signal waits for the save.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow loads

from bilm.commands.training_arguments import add_training_arguments, describe_result, train_from_args  # noqa: E402
from bilm.commands.user_errors import exit_on_user_error  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_arguments(parser)
    parser.add_argument("--options_file", help="options.json with the model and training keys")
    parser.add_argument("--size", choices=("small", "medium", "original"),
                        help="a released size instead of --options_file: small suits a CPU, medium and original "
                             "want GPUs")
    args = parser.parse_args(argv)
    with exit_on_user_error():
        result = train_from_args(args)
    print(describe_result(result, args.save_dir))
    return result


if __name__ == "__main__":
    main()
