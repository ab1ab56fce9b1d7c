"""On one CPU the JAX step is compiled for a bound on its batch's distinct tokens, and a step compiled for a
larger bound serves a batch that needs less: a run compiles a new step only when a batch needs more than any, and
its first step for what its first batches need together."""
import json

import pytest

from backend_processes import json_result, run_on_backend
from training_helpers import tiny_options

pytestmark = pytest.mark.slow  # JAX in a process of its own

STEPS = '''
import json, sys
import numpy as np
from bilm.options import load_options
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.config.settings import training_settings

options = json.loads(sys.argv[1])
_, settings = training_settings(options)
step = ArrayTrainStep(load_options(options), settings, seed=0)
state = step.initial_state()
rng = np.random.default_rng(0)
shape = (settings.batch_size, settings.unroll_steps, options["char_cnn"]["max_characters_per_token"])
batches = []
for n_words in json.loads(sys.argv[2]):  # each batch made of n_words distinct tokens, in both directions
    words = rng.integers(1, 261, size=(n_words, shape[2])).astype(np.int32)
    batch = {key: words[rng.integers(0, n_words, size=shape[:2])] for key in
             ("token_characters", "token_characters_reverse")}
    batch.update({key: rng.integers(0, settings.n_tokens_vocab, size=shape[:2]).astype(np.int32)
                  for key in ("next_token_id", "next_token_id_reverse")})
    batches.append(batch)
step.expect(batches[:int(sys.argv[3])])  # what a run reads ahead
compiled, losses = [], []
for batch in batches:
    state, metrics = step(state, batch, len(losses))
    losses.append(float(metrics["loss"]))
    compiled.append(sorted(bound.rows for bound in step.compiled_bounds()))
print(json.dumps({"compiled": compiled, "finite": bool(np.all(np.isfinite(losses)))}))
'''


def test_a_step_compiled_for_a_larger_bound_serves_and_a_new_one_only_when_needed():
    # 16 x 5 positions a direction, drawn from 40 words: a bound of 48 (the count rounded up to padded_length's
    # values); from 10: at most 12, which 48 serves; from 60: 64, a new step.
    report = json_result(run_on_backend("jax", STEPS, json.dumps(tiny_options()), json.dumps([40, 10, 60, 10]), "0"))
    assert report == {"compiled": [[48], [48], [48, 64], [48, 64]], "finite": True}, report


def test_a_run_compiles_its_first_step_for_what_its_first_batches_need_together():
    # The run reads its first batches ahead (bilm.training.arrays.training_run.EXPECTED_BATCHES): the first step
    # is compiled for the bound of 40 and 60 words together, which serves the batches after it; 100 words, not read
    # ahead, need more.
    report = json_result(run_on_backend("jax", STEPS, json.dumps(tiny_options()), json.dumps([40, 60, 10, 100]),
                                        "3"))
    assert report == {"compiled": [[64], [64], [64], [64, 96]], "finite": True}, report
