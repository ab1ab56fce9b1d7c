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
import os
import re
import sys
import warnings

from bilm.utils.backend import configured_backend

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
    backend = configured_backend()
    if backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
        return deterministic and _deterministic_xla_gpu()
    if backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        if deterministic and torch.cuda.is_available():
            torch.use_deterministic_algorithms(True, warn_only=True)
            return True
        return False
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    if deterministic and tf.config.list_physical_devices("GPU"):
        tf.config.experimental.enable_op_determinism()
        return True
    return False


# XLA's switch for deterministic GPU programs (scatter-adds and reductions in a fixed order, no autotuning that
# could pick kernels of other round-off); read from XLA_FLAGS when JAX's backends start.
DETERMINISTIC_XLA_FLAG = "--xla_gpu_deterministic_ops"
# The first JAX released after XLA's fixes of its deterministic scatter, which wrote wrong values without an
# error in some cases (jax-ml/jax#27796, an index 0; batched scatters; fixes proposed in XLA in September and
# December 2025). With an older JAX the flag is left off: a run that does not repeat bit for bit beats a wrong
# one. Not yet verified on a GPU here (bench/bench_jax_step_on_device.py is the check).
DETERMINISTIC_SCATTER_JAX = (0, 9)


def xla_flag_setting(flags, flag=DETERMINISTIC_XLA_FLAG):
    """What XLA_FLAGS `flags` (or None) say of boolean `flag`: True, False, or None where they do not name it
    (the last mention counts, as for XLA; a bare `--flag` is true)."""
    found = re.findall(rf"(?:^|\s){re.escape(flag)}(?:=(\S*))?(?=\s|$)", flags or "")
    return None if not found else found[-1].lower() not in ("false", "0")


def deterministic_xla_flags(flags):
    """`flags` (XLA_FLAGS, or None) with XLA's deterministic GPU ops on, unless they already say either way."""
    flags = (flags or "").strip()
    if xla_flag_setting(flags) is not None:
        return flags
    return f"{flags} {DETERMINISTIC_XLA_FLAG}=true".strip()


def jax_version_tuple(version):
    """`(major, minor)` of a JAX version string such as "0.9.2" or "0.10.0.dev20260101"."""
    major, minor = (version.split(".") + ["0"])[:2]
    return int(re.match(r"\d*", major).group() or 0), int(re.match(r"\d*", minor).group() or 0)


def _deterministic_xla_gpu():
    """Asks XLA for deterministic GPU programs (before JAX's backends start, which read XLA_FLAGS) where this
    JAX's deterministic scatter is known to be right; returns whether they run on a GPU, with a warning where a
    GPU runs without them."""
    import jax

    users = xla_flag_setting(os.environ.get("XLA_FLAGS"))  # the user's own word on the flag, if any
    try:
        from jax._src import xla_bridge

        started = xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):  # another JAX: assume not started, as scripts call this first
        started = False
    recent = jax_version_tuple(jax.__version__) >= DETERMINISTIC_SCATTER_JAX
    if recent:
        os.environ["XLA_FLAGS"] = deterministic_xla_flags(os.environ.get("XLA_FLAGS"))
    if not any(device.platform == "gpu" for device in jax.devices()):
        return False
    if users is not None:
        return users
    if not recent:
        warnings.warn(f"JAX {jax.__version__} on a GPU: its XLA's deterministic scatter could write wrong values, "
                      f"so bilm leaves {DETERMINISTIC_XLA_FLAG} off and --seed may not repeat a run bit for bit; "
                      f"JAX {'.'.join(map(str, DETERMINISTIC_SCATTER_JAX))} or later has it right.", stacklevel=3)
        return False
    if started:
        warnings.warn(f"JAX started its GPU before set_numerics, so its programs are not deterministic and --seed "
                      f"may not repeat a run bit for bit; call set_numerics first, or set "
                      f"XLA_FLAGS={DETERMINISTIC_XLA_FLAG}=true.", stacklevel=3)
        return False
    return True


def describe_devices():
    """The line that says where TensorFlow runs: each GPU it sees, with its name and compute capability, then
    the CPU."""
    backend = configured_backend()
    if backend == "jax":
        import jax

        devices = [f"{d.platform}:{d.id}" + (f" ({d.device_kind})" if d.platform != "cpu" else "")
                   for d in jax.devices()]
        return f"bilm: running on jax {', '.join(devices)}"
    if backend == "torch":
        import torch

        if not torch.cuda.is_available():
            return "bilm: running on torch CPU (no GPU visible to PyTorch)"
        gpus = [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
        return f"bilm: running on torch {', '.join(gpus)}, CPU"
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:
        return "bilm: running on CPU (no GPU visible to TensorFlow)"
    physical = tf.config.list_physical_devices("GPU")
    # One logical device per physical one unless a program split a GPU (tf.config.set_logical_device_configuration).
    details = [_details(device) for device in physical] if len(physical) == len(gpus) else [""] * len(gpus)
    names = [f"{gpu.name.split('device:')[-1]}{detail}" for gpu, detail in zip(gpus, details)]
    return f"bilm: running on {', '.join(names)}, CPU"


def _details(physical_device):
    """` (name, compute capability X.Y)` of a physical GPU, as much of it as TensorFlow reports."""
    import tensorflow as tf

    try:
        details = tf.config.experimental.get_device_details(physical_device)
    except (ValueError, tf.errors.OpError):
        return ""
    parts = []
    if details.get("device_name"):
        parts.append(details["device_name"])
    if details.get("compute_capability"):
        parts.append("compute capability " + ".".join(map(str, details["compute_capability"])))
    return f" ({', '.join(parts)})" if parts else ""


def missing_gpus_warning(n_gpus):
    """The `Warning:` line for `--n_gpus n_gpus` when TensorFlow sees no GPU, else None. (Fewer GPUs than asked,
    but some, is `make_strategy`'s error.) None on other backends (training is TensorFlow's)."""
    if not n_gpus or configured_backend() != "tensorflow":
        return None
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        return None
    asked = "a GPU" if n_gpus == 1 else f"{n_gpus} GPUs"
    if tf.test.is_built_with_cuda():
        reason = ("check that nvidia-smi shows the GPU; pip install 'bilm[gpu]' installs TensorFlow's CUDA "
                  "libraries; TF_CPP_MIN_LOG_LEVEL=0 shows TensorFlow's own reason")
    else:
        reason = "this TensorFlow is built without CUDA; on Linux, pip install 'bilm[gpu]' installs one with it"
    return f"Warning: --n_gpus {n_gpus} asks for {asked}, but TensorFlow sees none and runs on the CPU ({reason})."


def announce_devices(n_gpus=None, file=None):
    """Prints `describe_devices()` on standard error (or `file`), then `missing_gpus_warning(n_gpus)` if any."""
    file = sys.stderr if file is None else file
    print(describe_devices(), file=file, flush=True)
    warning = missing_gpus_warning(n_gpus)
    if warning:
        print(warning, file=file, flush=True)
