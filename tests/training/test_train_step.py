"""The training step on TensorFlow (the array step, its state in variables) updates only the softmax rows it
samples, and no op of its program makes a vocabulary-sized tensor."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.options import load_options
from bilm.training.arrays.train_step import ArrayTrainStep
from bilm.training.config.settings import training_settings
from training_helpers import MAX_CHARS, tiny_options


@pytest.mark.slow
def test_a_step_never_touches_the_whole_softmax_table():
    # A vocabulary of 10007 rows (a number no other tensor of the step has):
    # no op of the step's program may produce a tensor with that many rows.
    n_vocab = 10007
    options = tiny_options(n_tokens_vocab=n_vocab, n_negative_samples_batch=64, batch_size=16)
    _, settings = training_settings(options)
    step = ArrayTrainStep(load_options(options), settings, seed=0)
    state = step.initial_state()
    rng = np.random.default_rng(0)
    batch = {key: rng.integers(0, 261, size=(16, 5, MAX_CHARS)).astype(np.int32)
             for key in ("token_characters", "token_characters_reverse")}
    batch.update({key: rng.integers(0, 30, size=(16, 5)).astype(np.int32)
                  for key in ("next_token_id", "next_token_id_reverse")})
    before = state["softmax"]["W"].numpy()
    state, metrics = step(state, batch, 0)
    assert np.isfinite(float(metrics["loss"]))
    changed = np.flatnonzero(np.any(state["softmax"]["W"].numpy() != before, axis=1))
    assert 0 < len(changed) <= 16 * 5 * 2 + 2 * 64
    (compiled,) = step._steps.values()
    graph = compiled.function.get_concrete_function(state, step.placement.rows(batch),
                                                    tf.constant(0, tf.int32)).graph
    big = [op.name for op in graph.get_operations() for t in op.outputs
           if t.shape.rank and t.shape[0] == n_vocab and op.type != "VarHandleOp"]
    assert not big, big
