"""The command-line parser of every `bin/` script: one `Error:` line for a bad flag, defaults shown in `--help`."""
import argparse
import os
import sys

# Flags whose value is a glob of files, which an unquoted pattern turns into many words.
PATTERN_FLAGS = ("--train_prefix", "--heldout_prefix", "--test_prefix")


# Types of flag values: a bad value is the parser's one-line error.

def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text}")
    return value


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def rate(text):
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value



def add_renamed_flag(parser, new_flag, old_flag, **kwargs):
    """Adds `new_flag` (with `kwargs`) and `old_flag`, its deprecated old name, hidden from --help.

    Both store into `new_flag`'s dest; the old name prints one warning line
    naming the new one to stderr, and giving both is a usage error.
    """
    group = parser.add_mutually_exclusive_group()
    action = group.add_argument(new_flag, **kwargs)
    group.add_argument(old_flag, dest=action.dest, choices=action.choices, type=action.type,
                       metavar=action.metavar, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                       action=_DeprecatedFlag, new_flag=new_flag)
    return action


class _DeprecatedFlag(argparse.Action):
    """An old flag name: stores its value, after one warning line on stderr naming the new flag."""

    def __init__(self, *args, new_flag, **kwargs):
        super().__init__(*args, **kwargs)
        self.new_flag = new_flag

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"Warning: {parser.prog}: {option_string} is deprecated; use {self.new_flag}.", file=sys.stderr)
        setattr(namespace, self.dest, values)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's lines; ends each flag's help with its default where it has one."""

    def _get_help_string(self, action):
        text = action.help or ""
        # A switch (no value: --top, --no_resume) has no default of its own to show: its dest's
        # default belongs to the option it turns off, or to a group.
        switch = action.nargs == 0
        if switch or "%(default)" in text or "default:" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class ScriptArgumentParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are one line, `Error: <what> (see --help)`, exit status 2.

    Words left over because the shell expanded an unquoted pattern (`--train_prefix data/*`) get
    the advice to quote it.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{_expanded_pattern_hint(args, extras)}")
        return parsed

    def error(self, message):
        self.exit(2, f"Error: {self.prog}: {message} (see {self.prog} --help).\n")


def _expanded_pattern_hint(args, extras):
    """Advice when the leftover words follow a pattern flag and name existing files."""
    first = args.index(extras[0])
    before = args[:first]
    flags = [word for word in before if word.startswith("--")]
    if not flags or not any(os.path.exists(word) for word in extras):
        return ""
    flag = flags[-1].split("=")[0]
    if flag not in PATTERN_FLAGS:
        return ""
    return (f". The shell expanded the pattern of {flag} into several files; quote the pattern so that bilm "
            f"sees it, e.g. {flag} 'data/train/*'")
