"""Devices and numerics on Keras's NumPy backend (`bilm.backend`): the CPU, with NumPy's float32 arithmetic."""


# What runs on this backend, for `bilm doctor`.
WHAT_RUNS = ("On numpy: embedding and Keras models run; training needs TensorFlow, JAX or PyTorch, and "
             "SavedModel export, TF-Hub conversion and Apache Beam need TensorFlow.")


def set_numerics(tf32=False, deterministic=False):
    """Nothing to set: NumPy runs on the CPU, deterministic already; returns False."""
    return False


def describe_devices():
    return "bilm: running on numpy CPU"


def missing_gpus_warning(n_gpus):
    """None: NumPy never runs on a GPU, and training refuses this backend in one line."""
    return None
