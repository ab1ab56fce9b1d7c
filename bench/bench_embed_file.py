"""Sentences/sec of `embed_file(..., "all")` against the bare model, at the released sizes.

For each size, in its own process (so peak memory is its own): writes a
random model (`write_random_model`), generates sentences of
~25 made-up tokens, and measures
  - raw: `BidirectionalLanguageModel(stateful=False)` called on ids batched
    beforehand, in the same length-sorted batches embed_file uses (time of
    the model calls only, after an untimed pass over every batch; the token
    cache is emptied in between, so both start from a cold cache),
  - embed_file: the whole call (text in, HDF5 out: model loading, batching,
    copying every sentence out and writing it),
  - ELMo.embed: `ELMo(...)` (the model loaded, as `bilm.load` does once the
    files are found), then `embed(sentences, layers="all")` on the same
    sentences as token lists (arrays out, nothing written), timed with and
    without the loading,
and prints the rates, raw's ratio to embed_file, embed_file's fixed cost
(loading a model and tracing its first call, measured on a second model
after the raw runs; it dominates the ratio for a few hundred sentences) and
the peak resident memory. The output of "all" is large (3 x 2P floats per token: 3 KiB/token
small, 12 KiB/token original); it goes to a temporary folder that is removed
afterwards.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import per_config  # noqa: E402


def run_one(size, args):
    n_sentences, batch_size = args.sentences, args.batch_size
    from common import model_files, random_model, zipf_sentences
    from machine import clocked, peak_rss_gib

    from bilm.export.sentence_embeddings import embed_file
    from bilm.io.formats.sentence_files import length_sorted_batches
    from bilm.models.bidirectional_lm import BidirectionalLanguageModel
    from bilm.options import load_options
    from bilm.pretrained import ELMo
    from bilm.text.batching import Batcher

    with tempfile.TemporaryDirectory(prefix=f"bench_embed_file_{size}_") as directory:
        options_file, weight_file = model_files(random_model(directory, size))
        sentences = zipf_sentences(n_sentences)
        input_file = os.path.join(directory, "sentences.txt")
        with open(input_file, "w", encoding="utf-8") as f:
            f.writelines(" ".join(s) + "\n" for s in sentences)

        model = BidirectionalLanguageModel(options_file, weight_file, stateful=False)
        batcher = Batcher(None, load_options(options_file).char_cnn.max_characters_per_token)
        batches = [batcher.batch_sentences(batch) for batch in length_sorted_batches(
            sentences, batch_size, tokens_of=lambda sentence: sentence)]
        # One untimed pass: kernels are set up per batch shape, process-wide, so
        # without it whichever measurement ran first would pay for both.
        for ids in batches:
            model(ids)["lm_embeddings"].numpy()
        # The timed pass encodes its tokens afresh, as embed_file's new model does.
        model.token_cache.clear()
        start = time.perf_counter()
        for ids in batches:
            model(ids)["lm_embeddings"].numpy()
        raw_seconds = time.perf_counter() - start
        del model
        # What embed_file pays before its first batch: a fresh model, loaded and traced.
        start = time.perf_counter()
        model = BidirectionalLanguageModel(options_file, weight_file, stateful=False)
        model(batches[0][:1])["lm_embeddings"].numpy()  # one sentence: the trace serves every shape
        fixed_seconds = time.perf_counter() - start
        raw_peak = peak_rss_gib()
        del model

        output_file = os.path.join(directory, "elmo.hdf5")
        _, file_seconds = clocked(lambda: embed_file(input_file, output_file, options_file, weight_file,
                                                     output_format="all", batch_size=batch_size, verbose=0))
        file_peak = peak_rss_gib()

        elmo, elmo_load_seconds = clocked(lambda: ELMo(options_file, weight_file))
        vectors, elmo_seconds = clocked(lambda: elmo.embed(sentences, layers="all", batch_size=batch_size, verbose=0))
        n_tokens = sum(len(s) for s in sentences)
        assert sum(v.shape[1] for v in vectors) == n_tokens
        return {
            "size": size,
            "n_sentences": n_sentences,
            "n_tokens": n_tokens,
            "raw_sentences_per_sec": n_sentences / raw_seconds,
            "embed_file_sentences_per_sec": n_sentences / file_seconds,
            "embed_file_tokens_per_sec": n_tokens / file_seconds,
            "elmo_embed_tokens_per_sec": n_tokens / elmo_seconds,
            "elmo_load_and_embed_tokens_per_sec": n_tokens / (elmo_load_seconds + elmo_seconds),
            "fixed_seconds": fixed_seconds,
            "file_seconds": file_seconds,
            "raw_peak_rss_gib": raw_peak,
            "peak_rss_gib": file_peak,
            "elmo_peak_rss_gib": peak_rss_gib(),
            "output_gib": os.path.getsize(output_file) / 2 ** 30,
        }


def main():
    for size, r, args in per_config(__file__, run_one, __doc__, sizes=["small", "original"], sentences=2000,
                                    batch_size=64):
        print(f"{size:>9} ({r['n_sentences']} sentences, {r['n_tokens']} tokens, batch {args.batch_size}): "
              f"embed_file {r['embed_file_sentences_per_sec']:8.1f} sentences/sec, "
              f"raw model {r['raw_sentences_per_sec']:8.1f} sentences/sec, "
              f"ratio {r['embed_file_sentences_per_sec'] / r['raw_sentences_per_sec']:.2f} "
              f"(embed_file includes ~{r['fixed_seconds']:.1f} s of model loading and tracing); "
              f"peak RSS {r['raw_peak_rss_gib']:.2f} GiB raw, {r['peak_rss_gib']:.2f} GiB after embed_file, "
              f"{r['elmo_peak_rss_gib']:.2f} GiB after ELMo.embed; output {r['output_gib']:.2f} GiB")
        print(f"{size:>9} tokens/sec on the same sentences: embed_file {r['embed_file_tokens_per_sec']:8.0f}, "
              f"ELMo.embed {r['elmo_embed_tokens_per_sec']:8.0f} "
              f"({r['elmo_load_and_embed_tokens_per_sec']:.0f} with ELMo's loading, as embed_file includes its own)")


if __name__ == "__main__":
    main()
