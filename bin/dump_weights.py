#!/usr/bin/env python
"""Writes the latest checkpoint of --save_dir as a weight file for prediction.

The same as `bilm dump-weights`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("dump-weights")

if __name__ == "__main__":
    main()
