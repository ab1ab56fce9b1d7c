"""The benches' one command line: the flags they share, each defined once, and the run of a measurement in a
process of its own per configuration.

A bench builds its parser with `parser(__doc__, steps=20, batch_size=32, ...)`: each keyword names a shared
flag (`FLAGS`) and gives this bench's default (`None`: no default, `REQUIRED`: required); the bench adds
only the flags that are its own. `per_config(script, measure, ...)` runs a bench's measurement (a function
`measure(config, args) -> dict`) once per `--sizes` entry, each in a new process, so that each peak memory
is its own, and yields the results after printing the machine's line (`machine.machine_line`); `printed_json`
runs any such process. This module imports neither bilm nor a backend, so a bench that runs where only JAX or
PyTorch is installed uses it too.
"""
import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile

from machine import machine_line

# TensorFlow's C++ logs quiet in every bench (which imports this module before TensorFlow), unless set otherwise.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Every bench measures the bilm of the checkout it stands in, in its own process and in those it starts (its
# children, bin/ scripts): Python would otherwise import an installed bilm first, another checkout's where one
# is installed editable, so that two checkouts side by side measured one and the same code.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != ROOT:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
BACKEND_MODULES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
SIZES = ("tiny", "small", "medium", "original")
REQUIRED = object()


def names(text):
    """A comma-separated list of names (`"small,original"` -> `["small", "original"]`)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return items


def counts(text, least=0):
    """A comma-separated list of integers of at least `least`, in increasing order, each once."""
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < least:
        raise argparse.ArgumentTypeError(f"expected integers >= {least}, got {text!r}")
    return sorted(set(values))


# `counts` of at least 1.
positive_ints = functools.partial(counts, least=1)


def backend_names(text):
    """A comma-separated list of Keras backends (`tensorflow`, `jax`, `torch`), each once, in order."""
    backends = list(dict.fromkeys(names(text)))
    if any(backend not in BACKEND_MODULES for backend in backends):
        raise argparse.ArgumentTypeError(f"backends are some of {', '.join(BACKEND_MODULES)}; got {text!r}")
    return backends


# Every flag two benches or more take: one spelling, one meaning, one type each.
FLAGS = {
    "size": dict(choices=SIZES, help="the model's size, a preset of bilm.presets (tiny: a toy, for tests)"),
    "sizes": dict(type=names, help="comma-separated sizes (presets), each measured in a process of its own"),
    "backend": dict(choices=tuple(BACKEND_MODULES), help="the Keras backend"),
    "backends": dict(type=backend_names, help="comma-separated Keras backends (tensorflow, jax, torch)"),
    "steps": dict(type=int, help="steps timed (or trained)"),
    "warmup": dict(type=int, help="untimed steps first (tracing, compiling)"),
    "batch_size": dict(type=int, help="sentences (rows) a batch"),
    "batch_sizes": dict(type=positive_ints, help="comma-separated batch sizes"),
    "sentences": dict(type=int, help="sentences measured"),
    "unroll_steps": dict(type=int, help="tokens a row of a training batch"),
    "n_negative": dict(type=int, help="sampled negatives a step"),
    "n_tokens_vocab": dict(type=int, help="the softmax's vocabulary ids"),
    "lstm_dim": dict(type=int, help="the LSTM's size (cells)"),
    "projection_dim": dict(type=int, help="the LSTM's projection size"),
    "matmul_dtype": dict(choices=("float32", "bfloat16"),
                         help="bfloat16: the opt-in bfloat16 operands of the large matmuls (bilm.ops.matmul_dtype)"),
    "tf32": dict(action="store_true", help="let a GPU run float32 matmuls in TF32 (off: float32's round-off)"),
    "quick": dict(action="store_true", help="a quick run: the tiny size, a few steps, small batches (a CPU will do)"),
    "seed": dict(type=int, help="the random seed"),
    "n_general": dict(type=int, help="sentences of the general text"),
    "pretrain_steps": dict(type=int, help="steps on the general text"),
    "domain_steps": dict(type=counts, help="comma-separated step counts on the new text at which every start is "
                                           "evaluated"),
    "work_dir": dict(help="where the bench writes its files"),
    "cache_dir": dict(help="where the compared library's wheel and the models are kept for later runs"),
    "output": dict(help="also write the JSON report here (refused where it exists, unless --overwrite)"),
    "overwrite": dict(action="store_true", help="replace an existing --output"),
}


def parser(description, **defaults):
    """An `argparse.ArgumentParser` with `description` (a bench's docstring, shown as written) and the shared
    flags named in `defaults`, each with its default there (`None`: none; `REQUIRED`: required; a switch,
    `tf32`, `quick` or `overwrite`, is offered whatever the value). A flag keeps `FLAGS`' meaning; its help
    shows this bench's default."""
    unknown = set(defaults) - set(FLAGS)
    if unknown:
        raise ValueError(f"not shared flags: {', '.join(sorted(unknown))}; a bench adds its own with add_argument")
    result = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in defaults.items():
        spec = dict(FLAGS[name])
        if default is REQUIRED and "action" not in spec:
            spec["required"] = True
        elif default is not None and "action" not in spec:
            spec["default"] = default
            spec["help"] += f" (default: {','.join(map(str, default)) if isinstance(default, list) else default})"
        result.add_argument(f"--{name}", **spec)
    return result


def early_flag(name, default, argv=None):
    """The shared flag `name` of the command line (`argv`, default `sys.argv[1:]`), read before a bench imports
    what it fixes (Keras takes its backend at its first import); every other argument is left alone."""
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    early.add_argument(f"--{name}", **FLAGS[name], default=default)
    return getattr(early.parse_known_args(sys.argv[1:] if argv is None else argv)[0], name)


def per_config(script, measure, description, sizes, sentences, batch_size, extend=None):
    """Parses `--sizes`, `--sentences` and `--batch_size` (with these defaults; `extend(parser)` adds a
    bench's own flags) and runs `measure(config, args) -> dict` for each `--sizes` entry (a size, perhaps
    with a bench's modifiers, as `original:bfloat16`) in a new process of `script`. Yields `(config,
    result, args)`; a failed process ends the bench with its error."""
    command = parser(description, sizes=sizes, sentences=sentences, batch_size=batch_size)
    command.add_argument("--one", help=argparse.SUPPRESS)
    if extend is not None:
        extend(command)
    args = command.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return
    print(machine_line(), flush=True)
    for config in args.sizes:
        yield config, printed_json([script, *sys.argv[1:], "--one", config], f"{config}: the benchmark"), args


def interrupt_on_signals():
    """SIGINT and SIGTERM raise `KeyboardInterrupt(the signal's name)` from now on (also in a background job)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def printed_json(arguments, what, env=None):
    """The JSON value a new Python process (`python *arguments`, with `env`) prints on its last line; a failed one
    ends the bench with `what` and its error."""
    out = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_output(path, overwrite):
    """Before any work: ends the bench in one line where `--output` (`path`, None: none) exists without
    `--overwrite`, or its folder does not."""
    if path is None:
        return
    if os.path.exists(path) and not overwrite:
        sys.exit(f"Error: {path} exists; pass --overwrite to replace it.")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        sys.exit(f"Error: cannot write {path}: {directory} is not a directory.")


def read_json(path):
    """The JSON value the file `path` holds (as `write_report` writes one)."""
    with open(path) as f:
        return json.load(f)


def write_report(report, path, overwrite):
    """`report` as JSON to a temporary file beside `path`, then renamed over it; a file that appeared at `path`
    while the bench ran is kept unless `overwrite`."""
    if os.path.exists(path) and not overwrite:
        sys.exit(f"Error: {path} appeared while the bench ran; pass --overwrite to replace it.")
    directory, name = os.path.split(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(descriptor, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
