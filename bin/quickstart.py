#!/usr/bin/env python
"""Trains a tiny biLM on a generated corpus, evaluates it, dumps it, embeds with it.

The same as `bilm quickstart`; --help lists the flags.
"""
import os

os.environ.setdefault("BILM_COMMAND", "1")  # before bilm loads: a command's quiet start (bilm.utils.start_up)

from bilm.commands import subcommand_main  # noqa: E402

main = subcommand_main("quickstart")

if __name__ == "__main__":
    main()
