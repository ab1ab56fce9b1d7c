#!/usr/bin/env python
"""Writes the char-CNN embedding of every vocabulary token to an HDF5 file.

The same as `bilm dump-token-embeddings`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("dump-token-embeddings")

if __name__ == "__main__":
    main()
