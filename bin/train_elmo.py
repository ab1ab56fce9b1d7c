#!/usr/bin/env python
"""Trains a biLM on your own corpus (bilm-tf's bin/train_elmo.py).

The same as `bilm train`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("train")

if __name__ == "__main__":
    main()
