#!/usr/bin/env python
"""Held-out perplexity of the latest checkpoint in --save_dir (full softmax).

The same as `bilm evaluate`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("evaluate")

if __name__ == "__main__":
    main()
