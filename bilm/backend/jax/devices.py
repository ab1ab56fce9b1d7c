"""Devices and float32 arithmetic on JAX (`bilm.backend`; the scripts' `bilm.commands.devices`): JAX's default
float32 matmul precision, and for training XLA's deterministic GPU programs (`--xla_gpu_deterministic_ops`
added to XLA_FLAGS before JAX starts its backends, unless XLA_FLAGS already says either way; from JAX 0.9,
whose XLA has the known fixes of its deterministic scatter)."""
import os
import re
import warnings

# What runs on this backend, for `bilm doctor`.
WHAT_RUNS = ("On jax: embedding, Keras models, training and the scripts run; SavedModel export, TF-Hub "
             "conversion and Apache Beam need TensorFlow.")


def set_numerics(tf32=False, deterministic=False):
    """JAX's default matmul precision ("highest" unless `tf32`) and, with `deterministic`, XLA's deterministic
    GPU programs; returns whether they run on a GPU."""
    import jax

    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    return deterministic and _deterministic_xla_gpu()


def describe_devices():
    """`bilm: running on jax cpu:0` or each GPU with its kind."""
    import jax

    devices = [f"{d.platform}:{d.id}" + (f" ({d.device_kind})" if d.platform != "cpu" else "") for d in jax.devices()]
    return f"bilm: running on jax {', '.join(devices)}"


def missing_gpus_warning(n_gpus):
    """None: `--n_gpus` on JAX is checked where the devices are chosen (`training_ops.training_devices`)."""
    return None


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
