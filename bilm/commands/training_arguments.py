"""The flags of `bin/train_elmo.py` and `bin/restart.py`, and their closing line."""
import argparse
import os
import shlex
import shutil
import sys
import sysconfig

from bilm.commands.argument_parser import non_negative_int, positive_float, positive_int, rate
from bilm.ops.kernel_dtypes import MATMUL_DTYPES
from bilm.optimizers import OPTIMIZERS, default_learning_rates
from bilm.options.keys import default_text, option_key, training_keys
from bilm.training.run.stop_signals import TrainingInterrupted

# The training keys with a flag of the same name (`bilm.options.keys`). Unset, they come from the options
# file (or the checkpoint), else their defaults. --n_train_tokens and --matmul_dtype say their own defaults.
KNOB_FLAGS = tuple(key.name for key in training_keys() if key.flag and key.name not in ("n_train_tokens",
                                                                                         "matmul_dtype"))


def jit_compile_flag(text):
    """`--jit_compile`'s value: "auto", "true" or "false" (any case) as the training key takes it."""
    choices = {"auto": "auto", "true": True, "false": False}
    if text.lower() not in choices:
        raise argparse.ArgumentTypeError(f"expected auto, true or false, got {text!r}")
    return choices[text.lower()]


def _flag_type(key):
    if key.kind == "jit_compile":
        return jit_compile_flag
    if key.kind == "integer":
        return positive_int if key.low == 1 else non_negative_int
    if key.kind == "number":
        return rate if key.high == 1.0 else positive_float
    return str


def _flag_help(key):
    if key.name == "optimizer":
        return " or ".join(f"{name} ({optimizer.description})" for name, optimizer in OPTIMIZERS.items())
    return key.meaning


def _default_text(key):
    if key.name == "learning_rate":
        return ", ".join(f"{rate} for {name}" for name, rate in default_learning_rates().items())
    return default_text(key) if key.default is None else key.default


def add_training_arguments(parser):
    """Adds the command-line flags of bin/train_elmo.py and bin/restart.py; returns their `argparse.Action`s."""
    actions = [
        parser.add_argument("--train_prefix", required=True, help="glob of the training shards, e.g. 'data/train/*'"),
        parser.add_argument("--vocab_file", required=True, help="vocabulary: <S>, </S>, <UNK>, then by frequency"),
        parser.add_argument("--save_dir", required=True, help="checkpoints, options.json and logs/"),
        parser.add_argument("--n_train_tokens", type=positive_int, help=option_key("n_train_tokens").meaning),
    ]
    for key in map(option_key, KNOB_FLAGS):
        actions.append(parser.add_argument(
            f"--{key.name}", type=_flag_type(key), choices=sorted(OPTIMIZERS) if key.kind == "optimizer" else None,
            metavar="{auto,true,false}" if key.kind == "jit_compile" else None,
            help=f"{_flag_help(key)} (default: the options file's, else {_default_text(key)})"))
    actions += [
        parser.add_argument("--matmul_dtype", choices=MATMUL_DTYPES,
                            help="bfloat16: the highway, LSTM input-half and softmax matmuls take bfloat16 "
                                 "operands, faster where the hardware has bfloat16 matmuls (default: "
                                 "float32, the original arithmetic; see bilm.ops.matmul_dtype)"),
        parser.add_argument("--n_gpus", type=positive_int,
                            help="GPUs of this machine to train on (TF_CONFIG for several machines): where "
                                 "TensorFlow sees no GPU, --n_gpus 1 warns and trains on the CPU; more GPUs than "
                                 "it sees is an error (default: the first GPU TensorFlow sees, else the CPU)"),
        parser.add_argument("--heldout_prefix", help="glob of held-out shards, evaluated during training"),
        parser.add_argument("--heldout_every", type=positive_int,
                            help="also evaluate the held-out data every N steps"),
        parser.add_argument("--checkpoint_every", type=positive_int, default=1250, metavar="N",
                            help="save every N steps, at each epoch's end, and on Ctrl-C (SIGINT) or SIGTERM "
                                 "before exiting (default: %(default)s)"),
        parser.add_argument("--checkpoint_every_minutes", type=positive_float, default=30, metavar="M",
                            help="also save at least every M minutes (default: %(default)s)"),
        parser.add_argument("--log_dir", help="TensorBoard summaries (default: SAVE_DIR/logs)"),
        parser.add_argument("--seed", type=int, default=0,
                            help="seed of initialisation, shuffling and dropout: the same seed and flags repeat a "
                                 "run bit for bit on the same machine; on a GPU, the backend's deterministic "
                                 "programs are turned on for that (its sums, scatter-adds among them, otherwise "
                                 "add in a different order each run), unless --nondeterministic "
                                 "(default: %(default)s)"),
        parser.add_argument("--nondeterministic", action="store_true",
                            help="on a GPU, leave the backend's deterministic programs off: faster (JAX's training "
                                 "step at the original size on an H200: 1.7x, docs/gpu.md), but the same --seed no "
                                 "longer "
                                 "repeats a run bit for bit; no effect on a CPU, where a run repeats anyway"),
        parser.add_argument("--tf32", action="store_true",
                            help="let float32 matmuls run in TensorFloat-32 on an NVIDIA GPU of the Ampere "
                                 "generation or later (faster, their inputs rounded to a 10-bit mantissa); without "
                                 "it bilm turns TF32 off, so that a GPU trains in float32; no effect on a CPU"),
    ]
    return actions


def restart_command(args):
    """The `bin/restart.py` command line that continues the run of `args` (the flags of
    `add_training_arguments`): each of those flags whose value is not its default."""
    words = script_command("restart.py")
    for action in add_training_arguments(argparse.ArgumentParser()):
        value = getattr(args, action.dest, None)
        if value is not None and value != action.default:
            # A switch (--tf32) is its name alone; any other flag takes its value.
            words += [action.option_strings[0]] if action.nargs == 0 else [action.option_strings[0], str(value)]
    return shlex.join(words)


def script_command(name):
    """The words that run the bin/ script `name` from any directory: `bilm` and its subcommand where the
    running process is the `bilm` command; its name where pip installed it on the PATH, else `python` and
    its path beside the running script (a checkout's bin/)."""
    from bilm.commands import cli

    if cli.running_as_bilm():
        return ["bilm", cli.subcommand_of(name)]
    installed = os.path.join(sysconfig.get_path("scripts"), name)
    if os.path.isfile(installed):
        return [name] if shutil.which(name) else [installed]
    return ["python", os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), name)]


def describe_result(result, save_dir):
    """The closing line of bin/train_elmo.py and bin/restart.py for `train`'s result."""
    if result["steps_taken"] == 0 and result["finished"]:
        n_epochs = result["n_epochs"]
        return (f"Nothing to train: the run in {save_dir} has finished its {n_epochs} epoch(s) (step "
                f"{result['step']}). To train longer on the same data, rerun bin/restart.py with a larger "
                f"--n_epochs (e.g. --n_epochs {2 * n_epochs}); to fine-tune on other text, pass its shards "
                "as --train_prefix.")
    return f"Finished at step {result['step']}: {result['checkpoint']}"


def _adaptation_arguments(args):
    """`init_from` and `softmax_init` of bin/train_elmo.py's flags, when given."""
    if getattr(args, "init_from", None) is None:
        return {}
    return {"init_from": args.init_from, "softmax_init": args.softmax_init}


def train_from_files(*args, **kwargs):
    """`bilm.training.train_from_files` (one for every backend), imported when a script trains."""
    from bilm import training

    return training.train_from_files(*args, **kwargs)


def run_training_script(args, restart=False, before=None):
    """What bin/train_elmo.py and bin/restart.py do once their flags are parsed (`add_training_arguments`):
    float32 (unless --tf32) and repeatable numerics, the device line, `before()` if given (e.g. a conversion)
    and the run (`train_from_args`), a mistake ending in one line; prints the closing line and returns the
    result."""
    from bilm.commands.devices import announce_devices, set_numerics
    from bilm.commands.user_errors import exit_on_user_error

    # float32 stays float32 on a GPU unless --tf32, and --seed repeats a run there too (deterministic programs)
    # unless --nondeterministic.
    set_numerics(tf32=args.tf32, deterministic=not args.nondeterministic)
    announce_devices(n_gpus=args.n_gpus)
    with exit_on_user_error():
        if before is not None:
            before()
        result = train_from_args(args, restart=restart)
    print(describe_result(result, args.save_dir))
    return result


def train_from_args(args, restart=False):
    """`train_from_files` with the flags of `add_training_arguments` (and
    --options_file / --size), in a process of its own: malloc tuned for
    training, SIGINT and SIGTERM saving the step reached
    (`TrainingInterrupted`, its message naming the `restart_command` that
    continues), on Keras's backend."""
    try:
        return train_from_files(
            args.train_prefix, args.vocab_file, args.save_dir, getattr(args, "options_file", None),
            size=getattr(args, "size", None), restart=restart, n_train_tokens=args.n_train_tokens,
            matmul_dtype=args.matmul_dtype, overrides={key: getattr(args, key) for key in KNOB_FLAGS},
            n_gpus=1 if args.n_gpus is None else args.n_gpus, heldout_prefix=args.heldout_prefix,
            heldout_every=args.heldout_every,
            checkpoint_every=args.checkpoint_every, checkpoint_every_minutes=args.checkpoint_every_minutes,
            log_dir=args.log_dir, seed=args.seed, tune_malloc=True, save_on_signals=True,
            **_adaptation_arguments(args))
    except TrainingInterrupted as interrupted:
        # Before the first checkpoint nothing is kept: the same command starts over.
        again = "the same command" if interrupted.checkpoint is None else restart_command(args)
        raise TrainingInterrupted(interrupted.signal, interrupted.step, interrupted.checkpoint,
                                  by_peer=interrupted.by_peer, continue_with=again, phase=interrupted.phase) from None
