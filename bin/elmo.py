#!/usr/bin/env python
"""Writes the ELMo vectors of every line of a text file to HDF5 (AllenNLP's `elmo` command).

The same as `bilm embed`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("embed")

if __name__ == "__main__":
    main()
