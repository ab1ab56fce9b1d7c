#!/usr/bin/env python
"""Continues training from the latest checkpoint in --save_dir, optimizer state included.

The same as `bilm restart`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("restart")

if __name__ == "__main__":
    main()
