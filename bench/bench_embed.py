"""Embedding throughput of BidirectionalLanguageModel at the released sizes.

Embeds a few hundred ~25-token sentences (all layers, as `lm_embeddings`)
with random weights, every sentence from zero states (a stateless model, as
`bilm.load`, `ELMo` and `bin/elmo.py` run it), and prints tokens/sec, peak
memory, this machine's matmul rate in the run's kernel dtype
(`machine.matmul_rate`: bfloat16 the faster of float32's and the backend's
bfloat16 product) and the achieved fraction of it, counting the products
that ran (`common.embedding_flops`: the LSTMs' on every row, the first
layer's input half and the encoder's highway and projection once per
distinct token of a batch, or per token new to the token cache; the char
convolutions, table lookups and sums on TensorFlow, not at all); a roofline
(`common.roofline_seconds`: each step's kernels read at the memory's
measured rate or its rows computed at that matmul rate, whichever is
slower, over the rows still inside their sentence at each step, as bilm's
loop computes them) and the achieved fraction of it.

Each configuration runs in its own process so peak memory is its own. A
configuration is a size with optional modifiers:
- `:bfloat16` builds the model with `kernel_dtype="bfloat16"` (see
  `bilm.ops.matmul_dtype`) and, after the timing and the peak memory, also
  embeds the same batches with a float32 model to print how far each layer
  is from float32: for each token, the relative deviation of its vector,
  `|bf16 - f32| / |f32|` (Euclidean norms), max and mean over all tokens;
- `:bulk` batches as the bulk paths do (`ELMo.embed`, `embed_file`,
  `bin/elmo.py` without a batch size): sentences sorted by length, each
  batch up to `BULK_MAX_TOKENS` padded tokens; without it, batches of
  `--batch_size` (32) in input order;
- `:uncached` turns the token encoding cache off (`token_cache_size=0`);
- `:xla` runs the LSTMs' padded, masked XLA loop (`ProjectedLSTM`'s
  `jit_compile=True`) instead of the packed graph loop, for comparison.
A fresh model with a cold token cache embeds the timed batches; one batch
of other sentences from the same distribution warms it up first.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from harness import per_config  # noqa: E402
from machine import clocked, matmul_rate, peak_rss_gib  # noqa: E402

MODIFIERS = ("bfloat16", "bulk", "uncached", "xla")
DEFAULT_CONFIGS = [f"{size}{modifiers}" for size in ("small", "original")
                   for modifiers in ("", ":bfloat16", ":bulk", ":bulk:bfloat16")]


def embed(model, batches):
    return [model(ids)["lm_embeddings"].numpy() for ids in batches]


def run_one(config, args):
    n_sentences, batch_size = args.sentences, args.batch_size

    from bilm import Batcher, BidirectionalLanguageModel, load_options
    from bilm.io.formats.sentence_files import length_sorted_batches
    from bilm.layers.projected_lstm import ProjectedLSTM
    from bilm.ops.lowbit_matmul import inference_products

    preset, *modifiers = config.split(":")
    unknown = set(modifiers) - set(MODIFIERS)
    if unknown:
        raise ValueError(f"{config}: unknown modifiers {sorted(unknown)}; expected some of {MODIFIERS}")
    kernel_dtype = "bfloat16" if "bfloat16" in modifiers else "float32"
    model_dir = common.random_model(tempfile.mkdtemp(prefix=f"bench_{preset}_"), preset)
    options_file, weight_file = common.model_files(model_dir)
    options = load_options(options_file)
    cache_size = 0 if "uncached" in modifiers else 50_000

    def load(dtype):
        model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros",
                                           token_cache_size=cache_size, kernel_dtype=dtype)
        if "xla" in modifiers:
            for layer in model.network.layers:
                if isinstance(layer, ProjectedLSTM):
                    layer.jit_compile = True
        return model

    model = load(kernel_dtype)
    batcher = Batcher(None, options.char_cnn.max_characters_per_token)
    sentences = common.zipf_sentences(n_sentences + batch_size)
    warm_up, sentences = sentences[:batch_size], sentences[batch_size:]
    if "bulk" in modifiers:
        groups = list(length_sorted_batches(sentences, tokens_of=lambda sentence: sentence))
    else:
        groups = [sentences[i:i + batch_size] for i in range(0, len(sentences), batch_size)]
    batches = [batcher.batch_sentences(group) for group in groups]
    model(batcher.batch_sentences(warm_up))["lm_embeddings"].numpy()  # trace and warm up
    cache = model.token_cache
    misses = 0 if cache is None else cache.misses
    outputs, elapsed = clocked(lambda: embed(model, batches))
    peak = peak_rss_gib()
    tokens = sum(len(s) for s in sentences)
    encoded = sum(common.batch_rows(options, group)[1] for group in groups) if cache is None else cache.misses - misses
    flops = common.embedding_flops(options, groups, encoded)
    rate = matmul_rate(dtype=kernel_dtype)
    itemsize = common.KERNEL_ITEMSIZE[kernel_dtype]
    roofline = common.roofline_seconds(options, groups, encoded, itemsize, common.memory_read_bandwidth(), rate)
    tokens_per_sec = tokens / elapsed
    result = {
        "config": config,
        "batches": len(batches),
        "tokens_per_sec": tokens_per_sec,
        "peak_rss_gib": peak,
        "matmul_gflops": rate / 1e9,
        "matmul_dtype": kernel_dtype,
        "encoded_tokens": encoded,
        "fraction_of_matmul_rate": flops / elapsed / rate,
        "roofline_tokens_per_sec": tokens / roofline,
        "products": inference_products(kernel_dtype),
    }
    if kernel_dtype != "float32":
        del model
        reference = embed(load("float32"), batches)
        got, want = ([array[i, :, :len(sentence)] for array, group in zip(arrays, groups)
                      for i, sentence in enumerate(group)] for arrays in (outputs, reference))
        result["deviations"] = common.layer_deviations(got, want)
    return result


def main():
    for config, result, _ in per_config(__file__, run_one, __doc__, sizes=DEFAULT_CONFIGS, sentences=320,
                                        batch_size=32):
        print(f"{config:>22}: {result['tokens_per_sec']:8.0f} tokens/sec  "
              f"({result['batches']} batches)  "
              f"peak {result['peak_rss_gib']:.2f} GiB  "
              f"{result['matmul_dtype']} matmul {result['matmul_gflops']:.0f} GFLOP/s  "
              f"achieved {100 * result['fraction_of_matmul_rate']:.1f}% of it ({result['encoded_tokens']} tokens "
              "encoded)", flush=True)
        print(" " * 24 + f"roofline {result['roofline_tokens_per_sec']:.0f} tokens/sec (each step's kernels read at "
              f"the memory's rate or its rows at the matmul rate, whichever is slower): achieved "
              f"{100 * result['tokens_per_sec'] / result['roofline_tokens_per_sec']:.1f}% of it", flush=True)
        print(" " * 24 + f"products: {result['products']}", flush=True)
        if "deviations" in result:
            print(" " * 24 + common.describe_deviations(result["deviations"]), flush=True)


if __name__ == "__main__":
    main()
