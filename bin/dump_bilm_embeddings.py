#!/usr/bin/env python
"""Writes every sentence's biLM layers (n_layers + 1, n_tokens, 2P) to an HDF5 file.

The same as `bilm dump-bilm-embeddings`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("dump-bilm-embeddings")

if __name__ == "__main__":
    main()
