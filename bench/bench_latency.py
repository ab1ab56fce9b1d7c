"""Latency of one sentence per call, as a tagger or parser serving requests sees it.

Writes a random-weight model of each size and times what a user's new
process pays before its first vectors: `import bilm` (TensorFlow
included), `bilm.load` and the first sentence. Then it opens the model
likewise and embeds real English sentences (GCIDE's prose, from Debian's
dict-gcide, installed on first use) one per call with
`elmo.embed([sentence], layers="all")`, each sentence new to the model
(the token cache warm only from earlier sentences, as a service's would
be), after as many other sentences as a warm-up: the timed ones still
meet new words and new lengths, as a service does.

Beside each figure it prints the memory floor: every step of a sentence
streams each layer-direction's recurrent and projection kernels, and each
call reads the input kernels and the token encoder's kernels once, so a
sentence of n tokens (n + 2 steps with its boundaries) cannot take less
than `bytes / bandwidth`, with this machine's memory-read bandwidth
measured here (a float32 reduction over 256 MB, best of five). The
input half of every layer-direction (`x W_x` for all n + 2 rows at once)
and the token encoder of the words new to the model's cache (char CNN,
highway, projection) are arithmetic as well as bytes: from a dozen rows up
they take longer to compute at this machine's measured matmul rate for the
kernel dtype (`machine.matmul_rate`) than to read. So the floor counts
each part at the larger of its two bounds, as bench_original.py's roofline
does: `steps * max(step bytes / bandwidth, step FLOPs / rate) + max(call
bytes / bandwidth, (input-half FLOPs + new tokens * encoder FLOPs) /
rate)`; the memory-only floor (bytes alone) is printed beside it. The
bandwidth is the better of two measurements, before and after the timed
calls.

A configuration is a size with an optional `:<kernel_dtype>` (see
`bilm.ops.matmul_dtype.KERNEL_DTYPES`: bfloat16, or int8 whose floor
counts its per-column float32 scales too); a configuration other than float32
also prints each layer's relative deviation from float32 on the timed
sentences (per token vector, `|x - x_f32| / |x_f32|`, max and mean).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import numpy as np  # noqa: E402
from harness import per_config, printed_json  # noqa: E402
from machine import clocked, matmul_rate  # noqa: E402

DEFAULT_CONFIGS = ",".join(f"{size}{dtype}" for size in ("small", "original") for dtype in ("", ":bfloat16", ":int8"))
MIN_TOKENS, MAX_TOKENS = 5, 48


def real_sentences(n, skip=0):
    """`n` GCIDE sentences of MIN_TOKENS..MAX_TOKENS tokens (token lists), every 97th, after the first `skip`."""
    from real_text import spread_sentences

    return spread_sentences(n, 97, skip, MIN_TOKENS, MAX_TOKENS)


_START_UP = """
import json, sys, time
start = time.perf_counter()
import bilm
imported = time.perf_counter()
elmo = bilm.load(sys.argv[1], kernel_dtype=sys.argv[2])
loaded = time.perf_counter()
elmo.embed([sys.argv[3].split()], layers="all", verbose=0)
print(json.dumps([imported - start, loaded - imported, time.perf_counter() - loaded]))
"""


def start_up(directory, kernel_dtype, sentence, backend=None):
    """`(import, bilm.load, first sentence)` seconds in a new process, as a user's script pays them, on Keras's
    `backend` (None: the environment's `KERAS_BACKEND`, else TensorFlow)."""
    env = dict(os.environ, **({"KERAS_BACKEND": backend} if backend else {}))
    return printed_json(["-c", _START_UP, directory, kernel_dtype, " ".join(sentence)], "The start-up", env)


def run_one(config, args):
    """One configuration's figures, on a random-weight model written to a temporary directory (removed after)."""
    import bilm
    from bilm.ops.lowbit_matmul import inference_products

    size, *dtype = config.split(":")
    kernel_dtype = dtype[0] if dtype else "float32"
    timed = real_sentences(args.sentences)
    warm_up = real_sentences(args.sentences, skip=args.sentences)
    with tempfile.TemporaryDirectory(prefix=f"bench_latency_{size}_") as temporary:
        directory = common.random_model(temporary, size)
        import_seconds, load_seconds, first_seconds = start_up(directory, kernel_dtype, warm_up[0])
        elmo = bilm.load(directory, kernel_dtype=kernel_dtype)
        elmo.embed([warm_up[0]], layers="all", verbose=0)

        for sentence in warm_up:
            elmo.embed([sentence], layers="all", verbose=0)
        bandwidth_before = common.memory_read_bandwidth()
        cache = elmo.language_model.token_cache
        seconds, outputs, new_tokens = [], [], []
        for sentence in timed:
            misses = cache.misses
            output, spent = clocked(lambda: elmo.embed([sentence], layers="all", verbose=0)[0])
            outputs.append(output)
            seconds.append(spent)
            new_tokens.append(cache.misses - misses)

        itemsize = common.KERNEL_ITEMSIZE[kernel_dtype]
        per_step, per_call, encoder_bytes = common.kernel_bytes(elmo.options, itemsize,
                                                                column_scales=kernel_dtype == "int8")
        # A row through a kernel: 2 FLOPs a weight (a step's kernels; the input kernels, a call's less the encoder's).
        step_flops, call_flops, encoder_flops = (2 * weights for weights in common.kernel_bytes(elmo.options, 1))
        input_flops_per_row = call_flops - encoder_flops
        # The faster of two measurements, before and after the timed calls: a moment of others' traffic must not
        # lower the floor.
        bandwidth = max(bandwidth_before, common.memory_read_bandwidth())
        rate = matmul_rate(dtype=kernel_dtype)
        memory_floors, floors = [], []
        for sentence, new in zip(timed, new_tokens):
            steps = len(sentence) + 2
            call_bytes = per_call if new else per_call - encoder_bytes
            memory_floors.append((per_step * steps + call_bytes) / bandwidth)
            arithmetic = steps * input_flops_per_row + new * common.encoder_flops_per_token(elmo.options)
            floors.append(steps * max(per_step / bandwidth, step_flops / rate)
                          + max(call_bytes / bandwidth, arithmetic / rate))
        result = {
            "config": config,
            "tokens": [len(s) for s in timed],
            "new_tokens": new_tokens,
            "import_seconds": import_seconds,
            "load_seconds": load_seconds,
            "first_sentence_seconds": first_seconds,
            "seconds": seconds,
            "floor_seconds": floors,
            "memory_floor_seconds": memory_floors,
            "bandwidth": bandwidth,
            "matmul_rate": rate,
            "bytes_per_step": per_step,
            "products": inference_products(kernel_dtype),
        }
        if kernel_dtype != "float32":
            reference = bilm.load(directory)
            want = [reference.embed([s], layers="all", verbose=0)[0] for s in timed]
            result["deviations"] = common.layer_deviations(outputs, want)
        return result


def main():
    for config, r, _ in per_config(__file__, run_one, __doc__, sizes=DEFAULT_CONFIGS, sentences=40, batch_size=1):
        ms = 1e3 * np.array(r["seconds"])
        floor = 1e3 * np.array(r["floor_seconds"])
        memory_floor = 1e3 * np.array(r["memory_floor_seconds"])
        print(f"{config:>18}: {len(ms)} sentences of {min(r['tokens'])}-{max(r['tokens'])} tokens, one a call: "
              f"mean {ms.mean():.1f} ms, median {np.median(ms):.1f}, p90 {np.percentile(ms, 90):.1f}; "
              f"floor mean {floor.mean():.1f} ms: {ms.mean() / floor.mean():.2f}x the floor; "
              f"{np.mean(r['new_tokens']):.1f} tokens a call new to the cache", flush=True)
        print(" " * 20 + f"(memory: {r['bytes_per_step'] / 2 ** 20:.0f} MiB a step at {r['bandwidth'] / 1e9:.1f} GB/s; "
              f"arithmetic at {r['matmul_rate'] / 1e9:.0f} GFLOP/s; the memory-only floor, bytes alone, "
              f"{memory_floor.mean():.1f} ms: {ms.mean() / memory_floor.mean():.2f}x)", flush=True)
        print(" " * 20 + f"start-up in a new process: import bilm and TensorFlow {r['import_seconds']:.1f} s, "
              f"bilm.load {r['load_seconds']:.1f} s, first sentence {r['first_sentence_seconds']:.1f} s", flush=True)
        print(" " * 20 + f"products: {r['products']}", flush=True)
        if "deviations" in r:
            print(" " * 20 + common.describe_deviations(r["deviations"]), flush=True)


if __name__ == "__main__":
    main()
