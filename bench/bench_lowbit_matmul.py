"""The LSTM steps' matmuls with few rows: stock TensorFlow against bilm's low-bit kernel.

For the presets' per-step kernels (the recurrent one, `(projection_dim,
4 * dim)`, and the projection, `(dim, projection_dim)`) and a few row
counts, prints the time of one `x @ kernel` by
- `float32`: `tf.matmul` with a float32 kernel;
- `bilm f32`: bilm's own kernel with a float32 kernel (where its build
  has AVX2 and FMA; what inference's float32 products run at every row
  count where it is built with AVX-512, `tiles_float32`);
- `TF bf16`: `kernel_matmul` with a bfloat16 kernel (TensorFlow's
  bfloat16 matmul, x rounded to bfloat16: bilm's current bfloat16 path);
- `bilm bf16`, `bilm int8`: `lowbit_matmul` (bilm's own kernel) with a
  bfloat16 kernel, or an int8 one with per-column scales;
with the rate at which each reads its kernel, GB/s, and that rate as a
fraction of this machine's read bandwidth, measured first as the best of
several `tf.reduce_sum` over a 256 MB float32 array.
That reduction does not quite reach the memory's peak: a float32 matmul
of one row can read faster, above 1.0.

`--cache cold` (the default) cycles each call through copies of the kernel
totalling 128 MB (up to 128 copies), so each call reads its kernel from memory, as
an LSTM step does when the model's kernels do not fit in the cache;
`--cache warm` repeats one kernel, which then comes from the cache when it
fits. The calls run one after another in one `tf.function` (warm-up and
tracing excluded), as in a model's graph; each time is the best of a few
runs.

    flock /tmp/bench.lock python bench/bench_lowbit_matmul.py [--sizes original,small] [--rows 1,4,32]
        [--cache cold,warm]
"""
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from common import memory_read_bandwidth  # noqa: E402
from machine import clocked, machine_line  # noqa: E402

# Four times this machine's 32 MB L3 cache; at most MAX_COPIES kernels in the graph (tracing more takes
# minutes), so the copies of the smallest kernels may still fit in the cache.
COLD_BYTES = 128 * 2 ** 20
MAX_COPIES = 128
WARM_CALLS = 16
# Runs per time: at least MIN_RUNS, then more while under RUN_SECONDS in all, up to MAX_RUNS.
MIN_RUNS, MAX_RUNS, RUN_SECONDS = 2, 4, 0.5
METHODS = ("float32", "bilm f32", "TF bf16", "bilm bf16", "bilm int8")


def kernels(method, n, m, copies, seed=0):
    """`copies` kernels of `method`'s dtype, `(n, m)`, with the function `(x, kernel) -> product`."""
    import tensorflow as tf

    from bilm.ops.lowbit_matmul import lowbit_matmul, streamed_kernel_matmul
    from bilm.ops.matmul_dtype import kernel_matmul

    made = []
    for i in range(copies):
        kernel = tf.random.stateless_normal([n, m], seed=[seed, i])
        if method in ("float32", "bilm f32"):
            made.append((kernel,))
        elif method in ("TF bf16", "bilm bf16"):
            made.append((tf.cast(kernel, tf.bfloat16),))
        else:
            # Symmetric per-column quantization: the column's largest magnitude maps to 127.
            scale = tf.reduce_max(tf.abs(kernel), axis=0) / 127
            made.append((tf.cast(tf.round(kernel / scale), tf.int8), scale))
    product = {"float32": tf.matmul, "bilm f32": streamed_kernel_matmul, "TF bf16": kernel_matmul,
               "bilm bf16": lowbit_matmul, "bilm int8": lowbit_matmul}[method]
    return made, product


def seconds_per_call(method, rows, n, m, cache, bytes_per_value):
    """The best time of one `(rows, n) @ (n, m)` product by `method`, over a few runs."""
    import tensorflow as tf

    copies = min(MAX_COPIES, math.ceil(COLD_BYTES / (n * m * bytes_per_value))) if cache == "cold" else 1
    made, product = kernels(method, n, m, copies)
    calls = max(copies, WARM_CALLS)

    @tf.function
    def run(x):
        for i in range(calls):
            y = product(x, *made[i % copies])
            # Each call takes the previous one's output, as a recurrence's steps do (a control
            # dependency alone is optimised away, and with it the products nothing reads).
            x = x + 1e-30 * y[:, :1]
        return x

    x = tf.random.normal([rows, n])
    run(x).numpy()
    best, spent, runs = float("inf"), 0.0, 0
    while runs < MAX_RUNS and (runs < MIN_RUNS or spent < RUN_SECONDS):
        elapsed = clocked(lambda: run(x).numpy())[1]
        best, spent, runs = min(best, elapsed / calls), spent + elapsed, runs + 1
    return best


def shapes(sizes):
    from bilm.presets import get_preset

    for size in sizes:
        lstm = get_preset(size)["lstm"]
        yield f"{size} recurrent", lstm["projection_dim"], 4 * lstm["dim"]
        yield f"{size} projection", lstm["dim"], lstm["projection_dim"]


def main():
    parser = harness.parser(__doc__, sizes=["original", "small"])
    parser.add_argument("--rows", default="1,4,32", help="row counts, comma-separated")
    parser.add_argument("--cache", default="cold", help="cold (kernels from memory), warm, or both: cold,warm")
    args = parser.parse_args()
    print(machine_line(), flush=True)

    import tensorflow as tf

    from bilm.ops.lowbit_matmul import load_lowbit_ops, streams_float32

    start = time.perf_counter()
    if load_lowbit_ops() is None:
        raise SystemExit("bilm's low-bit kernel could not be built (see the warning above).")
    methods = [method for method in METHODS if method != "bilm f32" or streams_float32()]
    print(f"bilm's kernel loaded (built or found in the cache) in {time.perf_counter() - start:.1f} s")
    bandwidth = memory_read_bandwidth()
    print(f"read bandwidth, best tf.reduce_sum over 256 MB: {bandwidth / 1e9:.1f} GB/s; "
          f"{tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()} threads")
    print("each cell: ms per product, GB/s of kernel read, fraction of the read bandwidth")
    bytes_per_value = {"float32": 4, "bilm f32": 4, "TF bf16": 2, "bilm bf16": 2, "bilm int8": 1}
    header = f"{'kernel':<40} {'cache':<5} {'rows':>4} " + " ".join(f"{method:>22}" for method in methods)
    print(header)
    for cache in args.cache.split(","):
        for name, n, m in shapes(args.sizes):
            for rows in map(int, args.rows.split(",")):
                cells = []
                for method in methods:
                    seconds = seconds_per_call(method, rows, n, m, cache, bytes_per_value[method])
                    rate = n * m * bytes_per_value[method] / seconds
                    cells.append(f"{seconds * 1e3:8.3f} {rate / 1e9:6.1f} {rate / bandwidth:5.2f}")
                print(f"{f'{name} [{n}, {m}]':<40} {cache:<5} {rows:>4} " + " ".join(f"{c:>22}" for c in cells),
                      flush=True)


if __name__ == "__main__":
    main()
