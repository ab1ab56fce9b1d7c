"""The machine a bench figure comes from, printed with the figure, so that figures from two machines are never read as
one machine's: the CPU's model, its cores and which of the instruction sets bilm's speed depends on it has, its
matmul rate for float32 and bfloat16 kernels (the bound the benches' fractions are of) and a process's peak memory,
on the host and on a GPU; and the clock a bench times a call with (`clocked`, `best_seconds`). Reads /proc/cpuinfo
and times NumPy's BLAS; imports neither bilm nor a backend but in `device_peak_gib` and bfloat16's `matmul_rate`
(bench_backends.py's parent process runs where only JAX or PyTorch is installed)."""
import os
import platform
import resource
import sys
import time

# x86's vector and bfloat16 sets and ARM's bfloat16 ("bf16"), as /proc/cpuinfo names them.
INSTRUCTION_SETS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "bf16")


def _cpuinfo_fields():
    """`(model name or None, the first flags (x86) or Features (ARM) line or None)` of /proc/cpuinfo."""
    model, flags = None, None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if model is None and line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif flags is None and line.startswith(("flags", "Features")):
                    flags = line
    except OSError:
        pass
    return model, flags


def cpu_summary():
    """One line: `"<model>, <n> cores; avx2:yes fma:yes ..."` (the model /proc/cpuinfo's first `model name`, else
    the platform's name for it) for each of `INSTRUCTION_SETS` (x86's on x86, `bf16` on ARM; none where
    /proc/cpuinfo lists no flags)."""
    model, line = _cpuinfo_fields()
    summary = f"{model or platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    if line is None:
        return summary
    flags, arm = set(line.split(":", 1)[1].split()), line.startswith("Features")
    return summary + "; " + " ".join(f"{name}:{'yes' if name in flags else 'no'}"
                                     for name in INSTRUCTION_SETS if (name == "bf16") == arm)


def machine_line():
    """`"machine: " + cpu_summary()`, the line each bench prints before its figures."""
    return f"machine: {cpu_summary()}"


def clocked(function):
    """`(function(), the seconds it took)`: one call on the clock, nothing untimed before it."""
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def best_seconds(function, repeats=1, trials=1):
    """The fewest seconds of `trials` timings of `repeats` calls of `function()`, after one untimed call (tracing,
    warm-up); with one trial, their seconds."""
    function()
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(repeats):
            function()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_rate(n=2048, repeats=3, trials=3, dtype="float32"):
    """This machine's matmul rate in FLOP/s for a kernel of `dtype`: the best of `trials` timings of `repeats`
    (n, n) products, so that a slow start (clock ramping up, another process) does not lower it. float32 (and
    int8, whose kernels bilm widens to float32 products) by NumPy's BLAS; bfloat16 the faster of that and Keras's
    backend's own bfloat16 product (`keras.ops.matmul`, TensorFlow's oneDNN on TensorFlow): a CPU with bfloat16
    arithmetic runs bfloat16 products faster than float32 ones, and one without runs them widened, at most at
    float32's rate. Imports Keras for bfloat16."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    rate = 2 * n ** 3 * repeats / best_seconds(lambda: a @ b, repeats, trials)
    if dtype != "bfloat16":
        return rate
    from keras import ops

    a, b = (ops.cast(ops.convert_to_tensor(x), "bfloat16") for x in (a, b))
    # Reading one element of a product waits for it on a backend that queues its work.
    seconds = best_seconds(lambda: float(ops.convert_to_numpy(ops.cast(ops.matmul(a, b)[0, 0], "float32"))),
                           repeats, trials)
    return max(rate, 2 * n ** 3 * repeats / seconds)


def peak_rss_gib():
    """Peak resident memory of this process so far, in GiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** (30 if sys.platform == "darwin" else 20)


def device_peak_gib():
    """The peak memory in use on the first GPU of Keras's backend, in GiB (TensorFlow's `get_memory_info`, JAX's
    `peak_bytes_in_use`, PyTorch's `max_memory_allocated`); None on a CPU, where none is kept. Imports Keras."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2 ** 30 if gpus else None
    if backend == "torch":
        import torch

        return torch.cuda.max_memory_allocated() / 2 ** 30 if torch.cuda.is_available() else None
    import jax

    device = jax.devices()[0]
    stats = (device.memory_stats() or {}) if device.platform != "cpu" else {}
    return stats["peak_bytes_in_use"] / 2 ** 30 if "peak_bytes_in_use" in stats else None
