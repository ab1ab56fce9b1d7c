"""TrainStep: a compiled step updates only the softmax rows it samples, never the whole table."""
import numpy as np
import pytest
import tensorflow as tf

from bilm.optimizers.adagrad import SparseAdagrad
from bilm.options import load_options
from bilm.training.config.settings import training_settings
from bilm.training.tensorflow.train_step import TrainStep
from bilm.training.tensorflow.training_lm import TrainingLM
from training_helpers import MAX_CHARS, tiny_options


@pytest.mark.slow
def test_a_step_never_touches_the_whole_softmax_table():
    # A vocabulary of 10007 rows (a number no other tensor of the step has):
    # no op of the compiled step may produce a tensor with that many rows.
    n_vocab = 10007
    options = tiny_options(n_tokens_vocab=n_vocab, n_negative_samples_batch=64)
    _, settings = training_settings(options)
    lm = TrainingLM(load_options(options), settings)
    optimizer = SparseAdagrad(lm.trainable_variables(), 0.2)
    states = {key: tf.Variable(tf.zeros([16, size])) for key, _, size in lm.state_keys}
    step = TrainStep(lm, optimizer, states, tf.distribute.get_strategy(), settings, seed=0)
    rng = np.random.default_rng(0)
    batch = {key: tf.constant(rng.integers(0, 261, size=(16, 5, MAX_CHARS)), tf.int32)
             for key in ("token_characters", "token_characters_reverse")}
    batch.update({key: tf.constant(rng.integers(0, 30, size=(16, 5)), tf.int32)
                  for key in ("next_token_id", "next_token_id_reverse")})
    before = lm.softmax_weights.numpy()
    outputs = step(batch, 0)
    assert np.isfinite(float(outputs["loss"]))
    changed = np.flatnonzero(np.any(lm.softmax_weights.numpy() != before, axis=1))
    assert 0 < len(changed) <= 16 * 5 * 2 + 2 * 64
    graph = step.function.get_concrete_function(batch, tf.constant(0, tf.int64)).graph
    big = [op.name for op in graph.get_operations() for t in op.outputs
           if t.shape.rank and t.shape[0] == n_vocab and op.type != "VarHandleOp"]
    assert not big, big
