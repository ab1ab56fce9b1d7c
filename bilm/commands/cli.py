"""The `bilm` command: one entry point, a subcommand per command of bilm (`bilm train`, `bilm embed`, ...;
`bilm.commands.subcommands`), the same as `python -m bilm`. Each subcommand takes its bin/ script's flags.

Exit status: 0 done, 1 an error the user can fix (one `Error:` line), 2
a wrong command line, 128 + N stopped by signal N (130 for Ctrl-C).
"""
import importlib
import sys

from bilm.commands.subcommands import SUBCOMMANDS

_running = {"subcommand": None}


def main(argv=None):
    """Runs `bilm SUBCOMMAND [FLAGS]` (`argv` without the program's name; default `sys.argv[1:]`); returns what
    the subcommand returns."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(usage(), file=sys.stderr)
        sys.exit(2)
    if argv[0] in ("-h", "--help"):
        print(usage())
        return None
    if argv[0] == "--version":
        print(f"bilm {version()}")
        return None
    name = argv[0]
    if name not in SUBCOMMANDS:
        print(f"Error: bilm has no subcommand {name!r}; it has {', '.join(SUBCOMMANDS)} (bilm --help).",
              file=sys.stderr)
        sys.exit(2)
    running, _running["subcommand"] = _running["subcommand"], name
    try:
        return subcommand_main(name)(argv[1:], prog=f"bilm {name}")
    finally:  # a caller that runs a subcommand in its own process runs as itself again afterwards
        _running["subcommand"] = running


def subcommand_main(name):
    """The `main(argv=None, prog=None)` of subcommand `name` (of `SUBCOMMANDS`), what its bin/ script runs."""
    module, _, _ = SUBCOMMANDS[name]
    return importlib.import_module(f"bilm.commands.subcommands.{module}").main


def running_as_bilm():
    """Whether this process runs a subcommand of the `bilm` command (not a bin/ script)."""
    return _running["subcommand"] is not None


def subcommand_of(script):
    """The subcommand of the bin/ script `script` (e.g. `"restart.py"` -> `"restart"`)."""
    return next(name for name, (_, bin_script, _) in SUBCOMMANDS.items() if bin_script == script)


def usage():
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: bilm SUBCOMMAND [FLAGS]   (bilm SUBCOMMAND --help for its flags; bilm --version)", "",
             "subcommands:"]
    lines += [f"  {name:<{width}}  {what}" + (f" (bin/{script})" if script else "")
              for name, (_, script, what) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def version():
    from importlib import metadata

    try:
        return metadata.version("bilm")
    except metadata.PackageNotFoundError:
        return "(not installed: a checkout on the path)"
