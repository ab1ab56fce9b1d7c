"""Adagrad as TF1's `AdagradOptimizer` (the original recipe's optimizer)."""
from keras import ops

from bilm.optimizers.base import Optimizer

INITIAL_ACCUMULATOR_VALUE = 1.0


class SparseAdagrad(Optimizer):
    """Adagrad as TF1's `AdagradOptimizer` (no epsilon): `accum += g * g; var -= learning_rate * g /
    sqrt(accum)`, the accumulators starting at 1.0 (the original's). A table's gradient of some rows updates
    those rows alone (`bilm.training.arrays.optimizers`), so the cost of a step does not grow with the
    vocabulary."""

    name = "adagrad"
    default_learning_rate = 0.2
    description = "the original recipe's"
    slots_per_variable = 1
    checkpoint_signature = None  # checkpoints of other optimizers have a key of their own
    slot_starts = {"accumulators": INITIAL_ACCUMULATOR_VALUE}

    @classmethod
    def values_update(cls, gradient, slots, learning_rate, taken=None, iterations=None):
        step, accumulator = adagrad_rule(gradient, slots["accumulators"], learning_rate)
        return step, {"accumulators": accumulator}


def adagrad_rule(gradient, accumulator, learning_rate):
    """Adagrad's step on values, in `keras.ops` (every backend): `(step, new accumulator)`, `accum += g * g`,
    `step = learning_rate * g / sqrt(accum)`."""
    accumulator = accumulator + gradient * gradient
    return learning_rate * gradient * ops.rsqrt(accumulator), accumulator
