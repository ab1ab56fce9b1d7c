#!/usr/bin/env python
"""Trains a biLM on your own corpus (bilm-tf's bin/train_elmo.py).

Without --options_file the original configuration is trained
(2x4096_512_2048cnn_2xhighway, 10 epochs, batch 128 x 20, 8192 negatives).
"""
import argparse
import sys

from bilm.checkpoints import CheckpointError
from bilm.options import OptionsError
from bilm.training import add_training_arguments, train_from_args


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_arguments(parser)
    parser.add_argument("--options_file", help="options.json with the model and training keys")
    args = parser.parse_args(argv)
    try:
        result = train_from_args(args)
    except (OptionsError, CheckpointError, FloatingPointError, ValueError) as e:
        sys.exit(f"Error: {e}")
    print(f"Finished at step {result['step']}: {result['checkpoint']}")
    return result


if __name__ == "__main__":
    main()
