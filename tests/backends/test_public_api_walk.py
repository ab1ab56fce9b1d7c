"""Every public name of `bilm` (and Beam's model handler) runs on TensorFlow, JAX and PyTorch, or refuses in one
line (a `UserError`) that names TensorFlow: each is called on a tiny model in a process of each backend, so that a
function that works on one backend alone (as `dump_token_embeddings` and the handler once did) cannot go
unnoticed."""
import pytest

import bilm
from backend_processes import json_result, run_on_backend

pytestmark = pytest.mark.slow  # a process per backend

# What TensorFlow alone does; on the other backends these refuse in one line.
TENSORFLOW_ONLY = {"export_saved_model", "ELMoEmbedding on text"}

WALK = '''
import json, sys
from pathlib import Path
import numpy as np
import keras
import bilm
from helpers import SENTENCES, write_model, write_vocab

folder = Path(sys.argv[1])
options, weights, _ = write_model(folder)
vocab = write_vocab(folder, sorted({t for s in SENTENCES for t in s}))
text = folder / "text.txt"
text.write_text("\\n".join(" ".join(s) for s in SENTENCES if s) + "\\n")
sentences = [["The", "cat"], ["Hi"]]
char_ids = bilm.Batcher(vocab, 7).batch_sentences(sentences)
model = bilm.BidirectionalLanguageModel(options, weights, stateful=False, start="zeros")
lm = model(char_ids)


def check_shape(value, shape):
    assert tuple(keras.ops.shape(value)) == shape, (tuple(keras.ops.shape(value)), shape)


CALLS = {
    "Batcher": lambda: check_shape(char_ids, (2, 4, 7)),
    "TokenBatcher": lambda: check_shape(bilm.TokenBatcher(vocab).batch_sentences(sentences), (2, 4)),
    "Vocabulary": lambda: bilm.Vocabulary(vocab).word_to_id("cat"),
    "UnicodeCharsVocabulary": lambda: bilm.UnicodeCharsVocabulary(vocab, 7).word_to_char_ids("cat"),
    "BiLMOptions": lambda: bilm.BiLMOptions.from_dict(json.load(open(options))),
    "load_options": lambda: bilm.load_options(options),
    "UserError": lambda: issubclass(bilm.UserError, ValueError) or 1 / 0,
    "BidirectionalLanguageModel": lambda: check_shape(lm["lm_embeddings"], (2, 3, 2, 12)),
    "build_bilm": lambda: bilm.build_bilm(bilm.load_options(options)),
    "WeightLayers": lambda: check_shape(bilm.WeightLayers()(lm["lm_embeddings"], lm["mask"]), (2, 2, 12)),
    "weight_layers": lambda: check_shape(bilm.weight_layers("walk", lm)["weighted_op"], (2, 2, 12)),
    "load": lambda: [check_shape(v, (n, 12)) for v, n in zip(bilm.load(folder, start="zeros").embed(sentences),
                                                              (2, 1))],
    "ELMo": lambda: bilm.ELMo(options, weights, start="zeros").embed(sentences),
    "ELMoEmbedding": lambda: check_shape(bilm.ELMoEmbedding.from_files(options, weights, output="elmo",
                                                                       start="zeros")(char_ids), (2, 2, 12)),
    "ELMoEmbedding on text": lambda: bilm.ELMoEmbedding.from_files(options, weights, output="elmo", start="zeros")(
        np.array([["The", "cat"]])),
    "embed_file": lambda: bilm.embed_file(str(text), str(folder / "embedded.hdf5"), options_file=options,
                                          weight_file=weights, start="zeros"),
    "dump_bilm_embeddings": lambda: bilm.dump_bilm_embeddings(vocab, str(text), options, weights,
                                                              str(folder / "dump.hdf5")),
    "dump_token_embeddings": lambda: bilm.dump_token_embeddings(vocab, options, weights, str(folder / "tokens.hdf5"),
                                                                verbose=0),
    "export_saved_model": lambda: bilm.export_saved_model(options, weights, str(folder / "saved_model")),
    "bilm.beam.ELMoModelHandler": lambda: beam_inference([["The", "cat"], "Hi"], [(2, 12), (1, 12)]),
}


def beam_inference(sentences, shapes):
    from bilm.beam import ELMoModelHandler

    handler = ELMoModelHandler(options_file=str(options), weight_file=str(weights), layers="top", start="zeros",
                               tf32=False)
    for result, shape in zip(handler.run_inference(sentences, handler.load_model()), shapes, strict=True):
        check_shape(result.inference, shape)


report = {}
for name, call in CALLS.items():
    try:
        call()
        report[name] = "ok"
    except bilm.UserError as error:
        report[name] = "refused: " + str(error)
    except Exception as error:  # noqa: BLE001 (reported, and the test fails)
        report[name] = f"failed: {type(error).__name__}: {error}"
print(json.dumps({"report": report, "public": sorted(bilm.__all__)}))
'''


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_every_public_name_runs_or_refuses_in_one_line(tmp_path, backend):
    result = json_result(run_on_backend(backend, WALK, tmp_path))
    report = result["report"]
    # The walk covers the whole public surface (a name added to bilm.__all__ is added here).
    assert set(result["public"]) == set(bilm.__all__) <= set(report), sorted(set(bilm.__all__) - set(report))
    for name, outcome in report.items():
        if backend == "tensorflow" or name not in TENSORFLOW_ONLY:
            assert outcome == "ok", (name, outcome)
        else:
            assert outcome.startswith("refused: ") and "TensorFlow" in outcome and "\n" not in outcome, (name,
                                                                                                          outcome)
