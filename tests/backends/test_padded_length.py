"""Time padded to a few lengths, and a call's new words encoded in chunks of one size, where a backend compiles one
program per shape (JAX), with the outputs of the unpadded ids to float32 round-off: the boundary state and the
embeddings. (XLA promises no more: it orders a
product's sums by the program's shapes, alike on an AVX-512 Xeon, in the last bits otherwise on an AVX2 EPYC.)"""
import pytest

from backend_processes import json_result, run_on_backend
from bilm.backend.jax.inference import padded_length
from helpers import write_model


def test_jax_pads_to_few_lengths_at_most_half_again_and_the_others_not_at_all():
    lengths = range(1, 400)
    padded = [padded_length(n) for n in lengths]
    assert all(n <= p <= max(8, 1.5 * n) for n, p in zip(lengths, padded))
    assert sorted({padded_length(n) for n in range(1, 65)}) == [8, 12, 16, 24, 32, 48, 64]
    for backend in ("tensorflow", "torch", "numpy"):
        module = __import__(f"bilm.backend.{backend}.inference", fromlist=["padded_length"])
        assert [module.padded_length(n) for n in (1, 9, 37)] == [1, 9, 37], backend


ON_JAX = """
import json, sys
import numpy as np
from bilm.backend.jax import inference
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.models import boundary_state
from bilm.models.boundary_state import compute_boundary_state
from bilm.text.batching import Batcher
from helpers import SENTENCES

options_file, weight_file = sys.argv[1:3]
batcher = Batcher(None, 7)
stream = [s for s in SENTENCES if s] * 6  # sentences of 1 to 7 tokens, one a call: calls of 2 to 8 steps
model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
sentences = [["The", "cat", "sat", "on", "a", "mat", "today", "x", "y", "."], ["a", "b"], ["Hi"]]
asked, unpadded, results, measured = [], inference.padded_length, [], []
padded_ids = boundary_state.padded_ids
boundary_state.padded_ids = lambda ids, length=None: measured.append(padded_ids(ids, length).shape[1]) or padded_ids(
    ids, length)
for rule in (lambda n: asked.append(n) or unpadded(n), lambda n: n):
    inference.padded_length = rule
    state, _ = compute_boundary_state(model.network, model.options, stream, batcher.batch_sentences, rows=1)
    results.append((state, np.asarray(model(batcher.batch_sentences(sentences))["lm_embeddings"])))
    measured.append(None)
(state, padded), (exact_state, exact) = results
ends = measured.index(None)
print(json.dumps({"asked": asked, "embeddings_deviation": float(np.abs(padded - exact).max()),
                  "measure_lengths": [sorted(set(measured[:ends])), sorted(set(measured[ends + 1:-1]))],
                  "state_deviation": max(float(np.abs(state[k] - exact_state[k]).max()) for k in state),
                  "state_size": float(max(np.abs(v).max() for v in state.values()))}))
"""


@pytest.mark.slow
def test_on_jax_padding_keeps_the_boundary_state_and_the_embeddings(tmp_path):
    options_file, weight_file, _ = write_model(tmp_path)
    result = json_result(run_on_backend("jax", ON_JAX, options_file, weight_file))
    # Padding that leaked into a state (a masked step that ran) would move it by far more than round-off.
    assert result["embeddings_deviation"] <= 1e-5 and result["state_deviation"] <= 1e-5
    assert result["state_size"] > 0.01
    # Calls of several lengths, run padded: 12 steps for the 10 tokens and boundaries of the embedded batch.
    assert len(set(result["asked"])) > 3 and 12 in result["asked"] and padded_length(12) == 12
    assert any(padded_length(n) != n for n in result["asked"])
    # The measure's calls (2 to 9 steps, as 8 or 12) all at one length: one program (`shared_length`); unpadded,
    # each call at its own.
    assert result["measure_lengths"][0] == [12] and len(result["measure_lengths"][1]) > 3, result


NEW_SHAPES = """
import json, sys
import jax
import numpy as np
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.text.batching import Batcher

options_file, weight_file = sys.argv[1:3]
# Every program compiled here, none read from the session's persistent cache (a hit records no compilation).
jax.config.update("jax_enable_compilation_cache", False)
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kwargs: compiles.append(event) if event.endswith("backend_compile_duration") else None)
batcher = Batcher(None, 7)
words = "the cat sat on a mat with its hat".split()
sentences = [words[:n] for n in (9, 8, 7, 6, 5, 4, 3)]
model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
first = np.asarray(model(batcher.batch_sentences(sentences))["lm_embeddings"])  # 7 rows of 11 steps: 8 of 12
n_first, calls = len(compiles), []
for rows in (slice(1, 7), slice(2, 7)):  # 6 and 5 rows of 10 and 9 steps, padded alike; every word encoded
    out = model(batcher.batch_sentences(sentences[rows]))
    lm_embeddings = np.asarray(out["lm_embeddings"])
    n = len(sentences[rows][0])
    calls.append({"n": n, "shapes": [list(np.shape(out[key])) for key in ("lm_embeddings", "mask", "token_embeddings",
                                                                       "lengths")],
                  "deviation": float(np.abs(lm_embeddings - first[rows, :, :n]).max())})
print(json.dumps({"first": n_first, "later": len(compiles) - n_first, "calls": calls}))
"""


@pytest.mark.slow
def test_on_jax_a_call_of_new_shapes_within_compiled_padded_ones_compiles_nothing(tmp_path):
    """A stateless call's rows are padded to a few batch sizes, its time steps to a few lengths, and its outputs
    take their ELMo form within the compiled call, cut to the call's own shape on the host: a call of a new batch
    size and length within padded ones that have run compiles nothing (each new length cost a dozen small
    programs, each batch size the whole network), and gives each sentence's vectors as before."""
    options_file, weight_file, _ = write_model(tmp_path)
    result = json_result(run_on_backend("jax", NEW_SHAPES, options_file, weight_file))
    assert result["first"] >= 1 and result["later"] == 0, result
    for rows, call in zip((6, 5), result["calls"]):
        n = call["n"]
        assert call["shapes"] == [[rows, 3, n, 12], [rows, n], [rows, n + 2, 6], [rows]], result
        assert call["deviation"] < 1e-6, result


NEW_WORDS = """
import json, sys
import jax
import numpy as np
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.text.batching import Batcher

options_file, weight_file = sys.argv[1:3]
jax.config.update("jax_enable_compilation_cache", False)  # every program compiled here (see NEW_SHAPES)
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kwargs: compiles.append(event) if event.endswith("backend_compile_duration") else None)
batcher = Batcher(None, 7)
letters = "abcdefghijklmnopqrstuvwxyz"
new_words = iter(a + b + c for a in letters for b in letters for c in letters)  # three letters: one width


def batch(n_new):
    # 10 sentences of 20 tokens, the first n_new tokens new words, the others a word seen from the first call on.
    tokens = [next(new_words) for _ in range(n_new)] + ["the"] * (200 - n_new)
    return [tokens[i:i + 20] for i in range(0, 200, 20)]


model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
uncached = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros", token_cache_size=0)
# 70 new words: 64 and 6 (and "the"), both sizes of the encoder's chunks; with the calls of 30 and 150, each of the
# three paddings of the distinct tokens' rows (`distinct_rows`: 72, 144 and 288 of the 12 x 24 positions).
for n_new in (70, 30, 150):
    model(batcher.batch_sentences(batch(n_new)))
n_first, deviations = len(compiles), []
for n_new in (17, 40, 100, 140):  # each a count the first calls did not have
    sentences = batch(n_new)
    ids = batcher.batch_sentences(sentences)
    got = np.asarray(model(ids)["lm_embeddings"])
    n_compiles = len(compiles)
    want = np.asarray(uncached(ids)["lm_embeddings"])
    deviations.append(float(np.abs(got - want).max()))
    del compiles[n_compiles:]  # the uncached model's own programs
later = len(compiles) - n_first
# One sentence a call, of 10 tokens (12 steps): one program, however many of its tokens are distinct (3, 12, 6).
model(batcher.batch_sentences([["the"] * 10]))
n_one = len(compiles)
for sentence in ([next(new_words) for _ in range(10)], [next(new_words) for _ in range(3)] + ["the"] * 7):
    model(batcher.batch_sentences([sentence]))
print(json.dumps({"first": n_first, "later": later, "deviations": deviations, "one_sentence": len(compiles) - n_one,
                  "misses": model.token_cache.misses}))
"""


@pytest.mark.slow
def test_on_jax_new_words_in_any_number_are_encoded_by_two_programs(tmp_path):
    """The token cache encodes a call's new words in chunks of one size (`ENCODED_CHUNK_ROWS`, the last padded to
    it or to `ENCODED_ROWS_AT_LEAST`), and the network reads the distinct tokens padded to a quarter, a half or all
    of the call's positions: after calls with both chunk sizes and each padding, calls with 17 to 140 new words of
    that width compile nothing (each count used to compile an encoder of its own), and their vectors are those of
    every token encoded in the network, to float32 round-off. One sentence a call reads all of its positions
    (`DISTINCT_ROWS_WHOLE_UP_TO`): one program a padded length, whatever its count of distinct tokens."""
    options_file, weight_file, _ = write_model(tmp_path)
    result = json_result(run_on_backend("jax", NEW_WORDS, options_file, weight_file))
    assert result["first"] >= 1 and result["later"] == 0 and result["one_sentence"] == 0, result
    # Each new word once; and "the", the padding rows' empty token and the two sentence boundaries.
    assert result["misses"] == 4 + 70 + 30 + 150 + 17 + 40 + 100 + 140 + 13, result
    # Two programs' round-off (8e-6 to 1e-5 here); a padding row that leaked would move a vector by far more.
    assert max(result["deviations"]) < 5e-5, result


STEPS_RUN = """
import json, sys
import jax
import numpy as np
from bilm.backend.jax import inference
from bilm.models.bidirectional_lm import BidirectionalLanguageModel
from bilm.ops import lstm_scan
from bilm.text.batching import Batcher

options_file, weight_file = sys.argv[1:3]
# Each LSTM step that runs calls the cell once: counted on the host as it runs (a step the program skips calls
# nothing).
steps, cell = [], lstm_scan.lstm_cell


def counted_cell(*args, **kwargs):
    jax.debug.callback(lambda: steps.append(1))
    return cell(*args, **kwargs)


lstm_scan.lstm_cell = counted_cell
model = BidirectionalLanguageModel(options_file, weight_file, stateful=False, start="zeros")
batcher = Batcher(None, 7)
unpadded, results = inference.padded_length, {}
for rows in ([["The", "cat", "sat"]], [["The", "cat", "sat"], ["Hi"]]):  # 5 steps, boundaries included
    for name, rule in (("padded", unpadded), ("unpadded", lambda n: n)):
        inference.padded_length = rule
        steps.clear()
        out = np.asarray(model(batcher.batch_sentences(rows))["lm_embeddings"])
        jax.effects_barrier()
        results[f"{len(rows)} {name}"] = (len(steps), out)
print(json.dumps({"steps": {key: n for key, (n, _) in results.items()}, "padded_length": unpadded(5),
                  "deviation": max(float(np.abs(results[f"{n} padded"][1] - results[f"{n} unpadded"][1]).max())
                                   for n in (1, 2))}))
"""


@pytest.mark.slow
def test_on_jax_one_or_two_rows_run_no_lstm_step_past_the_longest_row(tmp_path):
    # One sentence of 3 tokens (5 steps) padded to 8, alone and beside a shorter one: the two layers' two
    # directions run 5 steps each, as the unpadded call does, and give its values.
    options_file, weight_file, _ = write_model(tmp_path)
    result = json_result(run_on_backend("jax", STEPS_RUN, options_file, weight_file))
    assert result["padded_length"] == 8, result
    assert result["steps"] == {"1 padded": 20, "1 unpadded": 20, "2 padded": 20, "2 unpadded": 20}, result
    assert result["deviation"] <= 1e-6, result
