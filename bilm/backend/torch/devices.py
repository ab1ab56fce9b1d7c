"""Devices and float32 arithmetic on PyTorch (`bilm.backend`; the scripts' `bilm.commands.devices`): PyTorch's
`allow_tf32` flags and deterministic algorithms."""
import torch

# What runs on this backend, for `bilm doctor`.
WHAT_RUNS = ("On torch: embedding, Keras models, training and the scripts run; SavedModel export, TF-Hub "
             "conversion and Apache Beam need TensorFlow.")


def set_numerics(tf32=False, deterministic=False):
    """TF32 on or off (`tf32`) and, with `deterministic` where a GPU is visible, PyTorch's deterministic
    algorithms; returns whether they were turned on."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    if deterministic and torch.cuda.is_available():
        torch.use_deterministic_algorithms(True, warn_only=True)
        return True
    return False


def describe_devices():
    """`bilm: running on torch CPU (...)` or each GPU with its name, then the CPU."""
    if not torch.cuda.is_available():
        return "bilm: running on torch CPU (no GPU visible to PyTorch)"
    gpus = [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
    return f"bilm: running on torch {', '.join(gpus)}, CPU"


def missing_gpus_warning(n_gpus):
    """None: `--n_gpus` on PyTorch is checked where the device is chosen (`training_ops.training_devices`)."""
    return None
