"""Devices and numerics on Keras's NumPy backend (`bilm.backend`): the CPU, with NumPy's float32 arithmetic."""


def set_numerics(tf32=False, deterministic=False):
    """Nothing to set: NumPy runs on the CPU, deterministic already; returns False."""
    return False


def describe_devices():
    return "bilm: running on numpy CPU"


def missing_gpus_warning(n_gpus):
    """None: NumPy never runs on a GPU, and training refuses this backend in one line."""
    return None
