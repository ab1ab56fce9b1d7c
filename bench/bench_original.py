"""bilm against the original code (allenai/bilm-tf), side by side on this CPU.

Embeds the same real English sentences (GCIDE's prose, Debian's
dict-gcide, installed on first use; every 50th sentence of the
dictionary, spread over its entries) in batches of `--batch_size` (32) in
input order, with one model of the original size (char CNN 2048 filters,
2 highway layers, 2 LSTM layers of 4096 cells projected to 512) and random
weights, written once as the original HDF5 layout plus `options.json` and
loaded by both codes:

- `original`: bilm-tf's `BidirectionalLanguageModel` and `Batcher`, run on
  this TensorFlow through `tensorflow.compat.v1` (v2 behaviour disabled)
  with the legacy Keras (`tf_keras`) that its `LSTMCell`s need. Its LSTMs
  carry their states from batch to batch; here an op zeroes its state
  variables before every batch (inside the timing; it is ~1 ms), so every
  sentence starts from zero states, as in bilm's runs;
- `bilm`: bilm's `BidirectionalLanguageModel(stateful=False,
  start="zeros")` with its defaults (the token encoding cache on), every
  sentence from zero states;
- `bilm:bfloat16`: the same with `kernel_dtype="bfloat16"` (see
  `bilm.ops.matmul_dtype`);
- `:1thread` after any of them runs TensorFlow with one thread per op and
  one op at a time, to show what the second core brings.

Each configuration runs in its own process (peak memory its own), embeds
one batch of other sentences untimed (tracing, warm-up), then times the
batches (char ids made beforehand by each code's own Batcher; the time is
the embedding, `lm_embeddings` fetched as numpy). It prints tokens/sec
(tokens without the sentence boundaries), peak RSS and the ratio to
`original`, and how far each bilm configuration's activations of the first
timed batch are from the original's (max abs difference per layer over the
valid positions: the original leaves layer 0 of padding positions
non-zero, bilm zeroes them). Other processes on the machine slow a run
down, so each line also says how many CPU-seconds other processes used
while it was timed (from /proc/stat).

`--profile` adds, for bilm's configurations, where the time of the same
timed run goes: the token encoder (char CNN, highway and projection of the
tokens new to the cache, TensorFlow's time), the cache's own bookkeeping,
the contextual part (the LSTM stacks and the output layers' assembly), the
rest (id checks, the copy of the output to numpy, Python); and the time
the LSTMs' step-by-step recurrent matmuls alone take on these batches
(rows still inside their sentence at each step, the run's matmul dtype)
and the time of its input halves `x W_x` over every valid position
(the model's first layer computes them per distinct token, so this
overstates it), with bilm's own kernel for bfloat16 where its inference
uses it. These two are measured alone, one call after another; in the
model the two directions' loops may overlap on the cores, so they can
add up to more than the model's time. Then this machine's float32 matmul
rate and read bandwidth, and each code's roofline on these batches from
them (see `roofline_seconds`). For `original` it times the char CNN,
highway and projection alone (its graph's token embeddings) on the same
batches.

Getting the original code (nothing of it is copied here):

    git clone https://github.com/allenai/bilm-tf /path/to/bilm-tf
    pip install --target /path/to/tfkeras "tf_keras~=2.21.0" --no-deps   # the TensorFlow's minor version

The checkout needs no edit: the original's process puts
`tensorflow.compat.v1` in place of `tensorflow` after
`disable_v2_behavior()` (its `squeeze_dims=` and `tf.nn.rnn_cell` still
exist there), sets `TF_USE_LEGACY_KERAS=1` and puts `--tf_keras` (if
given) on its own `PYTHONPATH`; bilm's processes do not see it. Then:

    flock /tmp/bench.lock python bench/bench_original.py --bilm_tf /path/to/bilm-tf \\
        --tf_keras /path/to/tfkeras [--sentences 320] [--batch_size 32] \\
        [--configs original,bilm,bilm:bfloat16] [--profile] [--work_dir DIR]

The model (357 MiB) is written to `--work_dir` (default
`$TMPDIR/bench_original`) once and reused.
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)

import common  # noqa: E402
import harness  # noqa: E402
import numpy as np  # noqa: E402
from machine import best_seconds, clocked, machine_line, matmul_rate, peak_rss_gib  # noqa: E402

DEFAULT_CONFIGS = "original,bilm,bilm:bfloat16"
MODIFIERS = ("bfloat16", "1thread")
SENTENCE_STRIDE = 50
MAX_CHARACTERS_PER_TOKEN = 50


def choose_sentences(n_sentences, batch_size):
    """`(warm-up batch, timed sentences)` from GCIDE, every `SENTENCE_STRIDE`th sentence after the front matter."""
    from real_text import spread_sentences

    chosen = spread_sentences(batch_size + n_sentences, SENTENCE_STRIDE, skip=1)
    if len(chosen) < batch_size + n_sentences:
        sys.exit(f"GCIDE gave only {len(chosen)} sentences; ask for fewer than {n_sentences}.")
    return chosen[:batch_size], chosen[batch_size:]


def prepare_model(work_dir, size):
    """`work_dir/model-<size>`, the random model (`common.random_model`), written once by a process of its own."""
    folder = os.path.join(work_dir, f"model-{size}")
    if not os.path.isdir(folder):
        print(f"Writing a random {size}-size model to {work_dir} ...", flush=True)
        code = ("import sys; sys.path[:0] = sys.argv[1:3]\n"
                "from common import random_model; random_model(*sys.argv[3:])")
        subprocess.run([sys.executable, "-c", code, BENCH_DIR, REPO_DIR, work_dir, size], check=True)
    with open(os.path.join(work_dir, "vocab.txt"), "w") as f:
        f.write("<S>\n</S>\n<UNK>\n")  # bilm-tf's Batcher reads a vocabulary; char ids need only these
    return folder


def run_original(args, modifiers):
    import tensorflow as tf

    try:
        import tf_keras
    except ImportError:
        sys.exit("tf_keras is missing: pip install --target DIR \"tf_keras~=%s.0\" --no-deps and pass --tf_keras DIR"
                 % ".".join(tf.__version__.split(".")[:2]))
    if tf_keras.__version__.split(".")[:2] != tf.__version__.split(".")[:2]:
        sys.exit(f"tf_keras {tf_keras.__version__} does not match TensorFlow {tf.__version__}: "
                 f"install tf_keras~={'.'.join(tf.__version__.split('.')[:2])}.0")
    tf1 = tf.compat.v1
    tf1.disable_v2_behavior()
    tf1.logging.set_verbosity(tf1.logging.ERROR)
    sys.modules["tensorflow"] = tf1
    sys.path.insert(0, args.bilm_tf)
    from bilm import Batcher, BidirectionalLanguageModel

    options_file, weight_file = common.model_files(os.path.join(args.work_dir, f"model-{args.size}"))
    batcher = Batcher(os.path.join(args.work_dir, "vocab.txt"), MAX_CHARACTERS_PER_TOKEN)
    ids_placeholder = tf1.placeholder("int32", shape=(None, None, MAX_CHARACTERS_PER_TOKEN))
    model = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=args.batch_size)
    lm_embeddings = model(ids_placeholder)["lm_embeddings"]
    graph = model._graphs[ids_placeholder]
    zero_states = tf1.group(*[state.assign(tf1.zeros_like(state))
                              for layers in graph.lstm_init_states.values() for states in layers for state in states])
    threads = 1 if "1thread" in modifiers else 0
    session = tf1.Session(config=tf1.ConfigProto(intra_op_parallelism_threads=threads,
                                                 inter_op_parallelism_threads=threads))
    session.run(tf1.global_variables_initializer())

    def embed(ids):
        session.run(zero_states)
        return session.run(lm_embeddings, {ids_placeholder: ids})

    return embed, batcher.batch_sentences, None, lambda ids: session.run(graph.embedding, {ids_placeholder: ids})


def run_bilm(args, modifiers):
    import tensorflow as tf

    if "1thread" in modifiers:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    sys.path.insert(0, REPO_DIR)
    from bilm import Batcher, BidirectionalLanguageModel

    options_file, weight_file = common.model_files(os.path.join(args.work_dir, f"model-{args.size}"))
    model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros",
                                       kernel_dtype="bfloat16" if "bfloat16" in modifiers else "float32")
    batcher = Batcher(None, MAX_CHARACTERS_PER_TOKEN)
    return (lambda ids: model(ids)["lm_embeddings"].numpy()), batcher.batch_sentences, model, None


def instrument(model):
    """Times bilm's parts from now on (the timed run): the token encoder, the cache's lookup as a whole, the LSTMs."""
    timer = common.PartTimer()
    cache = model.token_cache
    cache._encode = timer.wrap("token_encoder", cache._encode)
    cache.distinct_encodings = timer.wrap("token_cache", cache.distinct_encodings)
    model.calls._cached_calls[False] = timer.wrap("contextual", model.calls._cached_calls[False])
    return timer


def input_half_seconds(groups, options, kernel_dtype, repeats=3):
    """Seconds of every LSTM's input half, `x @ W_x` over a batch's valid
    positions (boundaries included) at once, as bilm's inference computes it."""
    import tensorflow as tf

    from bilm.ops.lowbit_matmul import inference_kernel_matmul

    lstm = options["lstm"]
    w_x = tf.cast(tf.random.normal([lstm["projection_dim"], 4 * lstm["dim"]], stddev=0.01), kernel_dtype)
    product = tf.function(lambda x: inference_kernel_matmul(x, w_x), autograph=False)
    inputs = [tf.random.normal([sum(len(s) + 2 for s in group), lstm["projection_dim"]]) for group in groups]
    return 2 * lstm["n_layers"] * sum(best_seconds(lambda x=x: product(x).numpy(), repeats) / repeats for x in inputs)


def cpu_seconds():
    """`(busy CPU seconds of the whole machine, CPU seconds of this process)` so far."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    own = os.times()
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def run_one(args):
    name, *modifiers = args.one.split(":")
    sentences = harness.read_json(os.path.join(args.work_dir, "sentences.json"))
    warm_up, timed = sentences["warm_up"], sentences["timed"]
    groups = [timed[i:i + args.batch_size] for i in range(0, len(timed), args.batch_size)]
    embed, batch_sentences, model, encode_tokens = (run_original if name == "original" else run_bilm)(
        args, modifiers)
    batches = [batch_sentences(group) for group in groups]
    embed(batch_sentences(warm_up))
    timer = instrument(model) if args.profile and model is not None else None
    busy_before, own_before = cpu_seconds()
    outputs, elapsed = clocked(lambda: [embed(ids) for ids in batches])
    busy_after, own_after = cpu_seconds()
    peak = peak_rss_gib()
    np.save(os.path.join(args.work_dir, f"first_batch_{re.sub(r'[^a-z0-9]+', '_', args.one)}.npy"), outputs[0])
    tokens = sum(len(s) for s in timed)
    result = {"config": args.one, "batches": len(batches), "tokens": tokens, "seconds": elapsed,
              "tokens_per_sec": tokens / elapsed, "peak_rss_gib": peak,
              "own_cpu_seconds": own_after - own_before,
              "others_cpu_seconds": max(0.0, (busy_after - busy_before) - (own_after - own_before))}
    if args.profile and model is None:
        result["parts"] = {"token_encoder": clocked(lambda: [encode_tokens(ids) for ids in batches])[1]}
    if timer:
        options = harness.read_json(common.model_files(os.path.join(args.work_dir, f"model-{args.size}"))[0])
        result["parts"] = dict(timer.seconds)
        result["recurrent_matmul_floor"] = common.recurrent_matmul_floor(options, groups, model.kernel_dtype)
        result["input_half_seconds"] = input_half_seconds(groups, options, model.kernel_dtype)
        result["matmul_gflops"] = matmul_rate() / 1e9
        result["bandwidth_gb_s"] = common.memory_read_bandwidth() / 1e9
        result["token_cache_misses"] = model.token_cache.misses
        result["token_cache_hits"] = model.token_cache.hits
    return result


def agreement(work_dir, config, reference, lengths):
    """Max abs difference per layer over valid positions, and the reference's largest magnitude."""

    def load(name):
        return np.load(os.path.join(work_dir, f"first_batch_{re.sub(r'[^a-z0-9]+', '_', name)}.npy"))

    got, want = load(config), load(reference)
    mask = np.arange(want.shape[2])[None, :] < np.asarray(lengths)[:, None]
    differences = [float(np.abs(got[:, layer][mask] - want[:, layer][mask]).max()) for layer in range(want.shape[1])]
    return differences, float(np.abs(want[:, :][np.broadcast_to(mask[:, None], want.shape[:3])]).max())


def describe_profile(result):
    parts, seconds = result["parts"], result["seconds"]

    def share(part_seconds):
        return f"{part_seconds:6.2f} s ({100 * part_seconds / seconds:4.1f}%)"

    if "contextual" not in parts:
        return " " * 4 + f"char CNN, highway and projection of every token, run alone: {share(parts['token_encoder'])}"
    encoder = parts["token_encoder"]
    contextual = parts["contextual"]
    floor = result["recurrent_matmul_floor"]
    return "\n".join(" " * 4 + line for line in [
        f"token encoder (char CNN, highway, projection) of {result['token_cache_misses']} tokens new to the "
        f"cache ({result['token_cache_hits']} hits): {share(encoder)}",
        f"token cache bookkeeping:                          {share(parts['token_cache'] - encoder)}",
        f"LSTM stacks and output assembly:                  {share(contextual)}",
        f"  of which the recurrent matmuls alone need:      {share(floor)}",
        f"  and the input halves (x W_x) alone:             {share(result['input_half_seconds'])}",
        f"rest (id checks, copy to numpy, Python):          {share(seconds - parts['token_cache'] - contextual)}",
        f"recurrent matmuls alone would allow {result['tokens'] / floor:.0f} tokens/sec; "
        f"this machine now: float32 matmul {result['matmul_gflops']:.0f} GFLOP/s, "
        f"memory read {result['bandwidth_gb_s']:.1f} GB/s",
    ])


def describe_other_work(result):
    """The share of the machine that other processes used while this configuration was timed."""
    available = (os.cpu_count() or 1) * result["seconds"]
    return (f"other processes used {result['others_cpu_seconds']:.1f} of {available:.1f} CPU-seconds "
            f"({100 * result['others_cpu_seconds'] / available:.0f}%); this one {result['own_cpu_seconds']:.1f}")


def original_roofline_seconds(timed, batch_size, options, bandwidth, rate):
    """The original code's least seconds on these batches if every product
    ran at this machine's float32 matmul `rate` or its read `bandwidth`,
    whichever binds (a step's time: max(kernel bytes / bandwidth, FLOPs /
    rate); elementwise work, threads and overheads not counted). Its
    `dynamic_rnn` runs every row of a batch to the batch's longest
    sentence, and each step multiplies `[x_t, h]` by one `(2P, 4U)` kernel,
    then projects `(U, P)`; it runs the char CNN, highway and projection on
    every position, padding included. bilm's is `common.roofline_seconds`."""
    lstm, encoder_flops = options["lstm"], common.encoder_flops_per_token(options)
    p, u, lstms = lstm["projection_dim"], lstm["dim"], 2 * lstm["n_layers"]
    seconds = 0.0
    for i in range(0, len(timed), batch_size):
        group = timed[i:i + batch_size]
        rows = common.rows_per_step([len(s) for s in group])
        seconds += len(rows) * len(group) * encoder_flops / rate + lstms * len(rows) * max(
            4 * (2 * p * 4 * u + u * p) / bandwidth, len(group) * 2 * (2 * p * 4 * u + u * p) / rate)
    return seconds


def describe_bounds(results, timed, batch_size, model_dir):
    """Each code's roofline on this machine, and the ratio to the original it would allow."""
    from bilm import load_options

    options = harness.read_json(common.model_files(model_dir)[0])
    groups = [timed[i:i + batch_size] for i in range(0, len(timed), batch_size)]
    measured = next(r for r in results.values() if "bandwidth_gb_s" in r)
    bandwidth, rate = measured["bandwidth_gb_s"] * 1e9, measured["matmul_gflops"] * 1e9
    lines = [f"rooflines (every product at {rate / 1e9:.0f} GFLOP/s or {bandwidth / 1e9:.1f} GB/s, whichever binds; "
             f"as measured in the first bilm profile):"]
    original = results.get("original")
    for config, result in results.items():
        if "parts" not in result:
            continue
        if config.startswith("original"):
            floor, note = original_roofline_seconds(timed, batch_size, options, bandwidth, rate), ""
        else:
            itemsize = 2 if "bfloat16" in config else 4
            floor = common.roofline_seconds(load_options(common.model_files(model_dir)[0]), groups,
                                            result["token_cache_misses"], itemsize, bandwidth, rate)
            note = f"; at its roofline {original['seconds'] / floor:.2f}x the original as measured" if original else ""
        seconds = result["seconds"]
        lines.append(f"  {config}: {floor:.1f} s; ran {seconds:.1f} s ({seconds / floor:.2f}x){note}")
    return "\n".join(lines)


def check_inputs(args, configs):
    if not os.path.isfile(os.path.join(args.bilm_tf, "bilm", "model.py")):
        sys.exit(f"--bilm_tf {args.bilm_tf}: not a checkout of allenai/bilm-tf (no bilm/model.py there); "
                 "git clone https://github.com/allenai/bilm-tf")
    for config in configs:
        name, *modifiers = config.split(":")
        if name not in ("original", "bilm") or set(modifiers) - set(MODIFIERS) or (
                name == "original" and "bfloat16" in modifiers):
            sys.exit(f"--configs: unknown configuration {config!r}; expected original[:1thread] or "
                     f"bilm[:bfloat16][:1thread]")
    where = f"none in --tf_keras {args.tf_keras}" if args.tf_keras else "not installed"
    if any(c.startswith("original") for c in configs) and not (
            os.path.isfile(os.path.join(args.tf_keras, "tf_keras", "__init__.py")) if args.tf_keras
            else importlib.util.find_spec("tf_keras") is not None):
        sys.exit(f"the original code needs tf_keras ({where}): pip install --target DIR \"tf_keras~=2.21.0\" "
                 "--no-deps and pass --tf_keras DIR")


def main():
    parser = harness.parser(__doc__, size="original", sentences=320, batch_size=32,
                            work_dir=os.path.join(tempfile.gettempdir(), "bench_original"))
    parser.add_argument("--bilm_tf", required=True, help="a checkout of allenai/bilm-tf")
    parser.add_argument("--tf_keras", help="a directory holding tf_keras (pip install --target), for the original")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument("--profile", action="store_true", help="where bilm's time goes")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.bilm_tf = os.path.abspath(args.bilm_tf)
    if args.one:
        print(json.dumps(run_one(args)))
        return
    configs = args.configs.split(",")
    check_inputs(args, configs)
    os.makedirs(args.work_dir, exist_ok=True)
    warm_up, timed = choose_sentences(args.sentences, args.batch_size)
    harness.write_report({"warm_up": warm_up, "timed": timed}, os.path.join(args.work_dir, "sentences.json"),
                         overwrite=True)
    model_dir = prepare_model(args.work_dir, args.size)
    print(machine_line())
    print(f"{args.size} size, {len(timed)} GCIDE sentences ({sum(map(len, timed))} tokens) in batches of "
          f"{args.batch_size}, every sentence from zero states", flush=True)
    results = {}
    for config in configs:
        env = dict(os.environ)
        if config.startswith("original"):
            env["TF_USE_LEGACY_KERAS"] = "1"
            if args.tf_keras:
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.abspath(args.tf_keras),
                                                                  env.get("PYTHONPATH")]))
        command = [__file__, "--one", config, "--bilm_tf", args.bilm_tf, "--sentences", str(args.sentences),
                   "--batch_size", str(args.batch_size), "--work_dir", args.work_dir, "--size", args.size]
        command += ["--profile"] if args.profile else []
        result = results[config] = harness.printed_json(command, f"{config}:", env)
        line = (f"{config:>16}: {result['tokens_per_sec']:7.0f} tokens/sec  ({result['seconds']:.2f} s, "
                f"{result['batches']} batches)  peak {result['peak_rss_gib']:.2f} GiB")
        threads = ":1thread" if config.endswith(":1thread") else ""
        reference = next((c for c in (f"original{threads}", "original") if c in results), None)
        if reference and config != reference:
            differences, scale = agreement(args.work_dir, config, reference, [len(s) for s in timed[:args.batch_size]])
            line += (f"  {result['tokens_per_sec'] / results[reference]['tokens_per_sec']:.2f}x {reference}\n"
                     f"{'':>18}max abs difference from {reference}, first batch, layers 0/1/2: "
                     + " / ".join(f"{d:.2e}" for d in differences) + f"  (largest activation {scale:.2f})")
        print(line, flush=True)
        print(f"{'':>18}{describe_other_work(result)}", flush=True)
        if "parts" in result:
            print(describe_profile(result), flush=True)
    if any("bandwidth_gb_s" in r for r in results.values()):
        print(describe_bounds(results, timed, args.batch_size, model_dir), flush=True)


if __name__ == "__main__":
    main()
