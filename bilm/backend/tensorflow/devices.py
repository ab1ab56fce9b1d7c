"""Devices and float32 arithmetic on TensorFlow (`bilm.backend`; the scripts' `bilm.commands.devices`):
TensorFloat-32 and op determinism, the GPUs TensorFlow sees, and why it sees none."""
import tensorflow as tf

# What runs on this backend, for `bilm doctor` (None: everything bilm does).
WHAT_RUNS = None


def set_numerics(tf32=False, deterministic=False):
    """TensorFloat-32 on or off (`tf32`) and, with `deterministic` where a GPU is visible, op determinism;
    returns whether it was turned on."""
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    if deterministic and tf.config.list_physical_devices("GPU"):
        tf.config.experimental.enable_op_determinism()
        return True
    return False


def describe_devices():
    """The line that says where TensorFlow runs: each GPU it sees, with its name and compute capability, then
    the CPU."""
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
    but some, is `make_strategy`'s error.)"""
    if not n_gpus:
        return None
    if tf.config.list_logical_devices("GPU"):
        return None
    asked = "a GPU" if n_gpus == 1 else f"{n_gpus} GPUs"
    if tf.test.is_built_with_cuda():
        reason = ("check that nvidia-smi shows the GPU; pip install 'bilm[gpu]' installs TensorFlow's CUDA "
                  "libraries; TF_CPP_MIN_LOG_LEVEL=0 shows TensorFlow's own reason")
    else:
        reason = "this TensorFlow is built without CUDA; on Linux, pip install 'bilm[gpu]' installs one with it"
    return f"Warning: --n_gpus {n_gpus} asks for {asked}, but TensorFlow sees none and runs on the CPU ({reason})."
