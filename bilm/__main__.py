"""`python -m bilm`: the `bilm` command (`bilm.commands.cli`)."""
from bilm.commands.cli import main

if __name__ == "__main__":
    main()
