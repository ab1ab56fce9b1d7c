#!/usr/bin/env python
"""Writes a biLM training vocabulary (<S>, </S>, <UNK>, then tokens by count).

The same as `bilm vocab`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("vocab")

if __name__ == "__main__":
    main()
