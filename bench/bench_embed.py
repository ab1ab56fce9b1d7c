"""Embedding throughput of BidirectionalLanguageModel at the released sizes.

Embeds a few hundred ~25-token sentences in batches of 32 (all layers, as
`lm_embeddings`) with random weights, and prints tokens/sec, peak memory,
this machine's float32 matmul rate and the achieved fraction of it
(counting the token encoder, convolution multiply-adds included, for
every token, so above 100% is possible where the token cache or the
convolution's table lookups spare that work), and a ceiling: the tokens/sec that
the recurrent matmuls alone would allow at this batch size, since no
recurrence can beat its own step-by-step matmuls.

Each size runs in its own process so peak memory is its own. A size with
`:uncached` turns the token encoding cache off (`token_cache_size=0`). One
batch of other sentences from the same distribution warms the model up
first, as in a long run.

    python bench/bench_embed.py [--sizes small,small:uncached,original] [--n_sentences 320]
"""
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import run_sizes  # noqa: E402


def run_one(size, n_sentences, batch_size):
    from bilm import Batcher, BidirectionalLanguageModel, load_options
    from bilm.models.random_weights import write_random_model
    from bilm.presets import get_preset
    from common import forward_flops_per_token, matmul_rate, peak_rss_gib, recurrent_matmul_seconds, zipf_sentences

    preset, _, variant = size.partition(":")
    directory = tempfile.mkdtemp(prefix=f"bench_{preset}_")
    options_file, weight_file = write_random_model(directory, get_preset(preset))
    options = load_options(options_file)
    cache_size = {"": 50_000, "uncached": 0}[variant]
    model = BidirectionalLanguageModel(options_file, weight_file, max_batch_size=batch_size,
                                       token_cache_size=cache_size)
    batcher = Batcher(None, options.char_cnn.max_characters_per_token)
    sentences = zipf_sentences(n_sentences + batch_size)
    warm_up, sentences = sentences[:batch_size], sentences[batch_size:]
    batches = [batcher.batch_sentences(sentences[i:i + batch_size])
               for i in range(0, len(sentences), batch_size)]
    model(batcher.batch_sentences(warm_up))["lm_embeddings"].numpy()  # trace and warm up
    start = time.perf_counter()
    for ids in batches:
        model(ids)["lm_embeddings"].numpy()
    elapsed = time.perf_counter() - start
    tokens = sum(len(s) for s in sentences)
    rate = matmul_rate()
    # Every batch runs 2 x n_layers recurrences over its longest row.
    steps = sum(ids.shape[1] for ids in batches)
    floor = 2 * options.n_layers * recurrent_matmul_seconds(
        batch_size, steps // len(batches), options.lstm_dim, options.projection_dim) * len(batches)
    tokens_per_sec = tokens / elapsed
    return {
        "size": size,
        "tokens_per_sec": tokens_per_sec,
        "peak_rss_gib": peak_rss_gib(),
        "matmul_gflops": rate / 1e9,
        "fraction_of_matmul_rate": tokens_per_sec * forward_flops_per_token(options) / rate,
        "recurrent_matmul_ceiling": tokens / floor,
    }


def main():
    for size, result, _ in run_sizes(__file__, run_one, __doc__, default_sentences=320, default_batch=32,
                                       default_sizes="small,small:uncached,original,original:uncached"):
        print(f"{size:>18}: {result['tokens_per_sec']:8.0f} tokens/sec  "
              f"peak {result['peak_rss_gib']:.2f} GiB  "
              f"matmul {result['matmul_gflops']:.0f} GFLOP/s  "
              f"achieved {100 * result['fraction_of_matmul_rate']:.1f}% of it  "
              f"(recurrent matmuls alone allow {result['recurrent_matmul_ceiling']:.0f} tokens/sec)")


if __name__ == "__main__":
    main()
