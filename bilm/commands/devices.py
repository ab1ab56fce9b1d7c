"""Where a `bin/` script runs, and the float32 arithmetic it asks of its Keras backend there.

A script is the user's process, so it, not the library, sets TensorFlow's
process-wide switches (`set_numerics`):

- TensorFloat-32 off unless --tf32: on an NVIDIA GPU of the Ampere
  generation or later TensorFlow otherwise runs float32 matmuls and
  convolutions with their inputs rounded to TF32's 10-bit mantissa, so a
  GPU would not keep float32's round-off. No effect on a CPU.
- op determinism for training, where a GPU is visible: GPU kernels (XLA's
  scatter-adds among them) otherwise add in an order that changes from
  run to run, and --seed would not repeat a run bit for bit. On a CPU it
  stays off: bilm's training already repeats bit for bit there, and the
  mode would only add its checks.

Each script then prints one line on standard error (`announce_devices`):
`bilm: running on GPU:0 (NVIDIA H100 80GB HBM3, compute capability 9.0), CPU`
or `bilm: running on CPU (no GPU visible to TensorFlow)`, and a `Warning:`
line where --n_gpus asked for a GPU that TensorFlow does not see (the
scripts set TF_CPP_MIN_LOG_LEVEL=3, which hides TensorFlow's own reason).

On JAX and PyTorch (`KERAS_BACKEND`) the same switches are theirs: JAX's
default float32 matmul precision ("highest" unless --tf32) and, for
training, XLA's deterministic GPU programs (`--xla_gpu_deterministic_ops`
added to XLA_FLAGS before JAX starts its backends, unless XLA_FLAGS already
says either way; from JAX 0.9, whose XLA has the known fixes of its
deterministic scatter); PyTorch's `allow_tf32` flags and deterministic
algorithms; the line names the backend's devices
(`bilm: running on jax cuda:0 (NVIDIA H100 80GB HBM3)`).
"""
import sys

from bilm.backend import backend_module

TF32_HELP = ("Let float32 matmuls and convolutions run in TensorFloat-32 on an NVIDIA GPU of the Ampere "
             "generation or later: faster, with their inputs rounded to a 10-bit mantissa. Without it bilm "
             "turns TF32 off, so that a GPU keeps float32's round-off; no effect on a CPU.")


def add_tf32_argument(parser):
    """--tf32: let TensorFlow use TensorFloat-32 on a GPU (`set_numerics(tf32=args.tf32)`)."""
    parser.add_argument("--tf32", action="store_true", help=TF32_HELP)


def set_numerics(tf32=False, deterministic=False):
    """Turns TensorFloat-32 on or off (`tf32`), and with `deterministic` the backend's deterministic GPU programs
    (TensorFlow's op determinism, XLA's deterministic ops on JAX, PyTorch's deterministic algorithms) where a GPU is
    visible; returns whether they were turned on. Process-wide: for scripts, not for a library."""
    return backend_module("devices").set_numerics(tf32=tf32, deterministic=deterministic)


def describe_devices():
    """The line that says where the backend runs: each GPU it sees (with its name, and on TensorFlow its compute
    capability), then the CPU."""
    return backend_module("devices").describe_devices()


def missing_gpus_warning(n_gpus):
    """The `Warning:` line for `--n_gpus n_gpus` when TensorFlow sees no GPU, else None (on JAX and PyTorch the
    devices are checked where training chooses them)."""
    return backend_module("devices").missing_gpus_warning(n_gpus)


def announce_devices(n_gpus=None, file=None):
    """Prints `describe_devices()` on standard error (or `file`), then `missing_gpus_warning(n_gpus)` if any."""
    file = sys.stderr if file is None else file
    print(describe_devices(), file=file, flush=True)
    warning = missing_gpus_warning(n_gpus)
    if warning:
        print(warning, file=file, flush=True)
