"""Adam (Kingma and Ba), lazy on sparse rows: bilm's opt-in optimizer."""
from keras import ops

from bilm.optimizers.base import Optimizer


class SparseAdam(Optimizer):
    """Adam, lazy on sparse rows.

    `m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)`, with
    `t` the steps taken. A table's gradient of some rows updates only those
    rows of the table and of both moments (the moments of rows it does not
    touch keep their values, as in "lazy" Adam), so the cost of a step does
    not grow with the vocabulary. A skipped step (gradient scale 0) changes
    nothing, not even the moments or `t`.
    """

    name = "adam"
    default_learning_rate = 0.002
    description = "bilm's opt-in, faster per step: docs/learning_parity.md"
    slots_per_variable = 2
    checkpoint_signature = "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE"
    slot_starts = {"m": 0.0, "v": 0.0}
    counts_steps = True
    BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7

    @classmethod
    def values_update(cls, gradient, slots, learning_rate, taken, iterations):
        step_size = adam_step_size(learning_rate, cls.BETA_1, cls.BETA_2, iterations)
        step, first, second = adam_rule(gradient, slots["m"], slots["v"], taken, step_size, cls.BETA_1,
                                        cls.BETA_2, cls.EPSILON)
        return step, {"m": first, "v": second}


def adam_step_size(learning_rate, beta_1, beta_2, t):
    """Adam's step size after `t` steps (this one included): `lr sqrt(1 - b2^t) / (1 - b1^t)`, in `keras.ops`."""
    return learning_rate * ops.sqrt(1.0 - ops.power(beta_2, t)) / (1.0 - ops.power(beta_1, t))


def adam_rule(gradient, first, second, taken, step_size, beta_1, beta_2, epsilon):
    """Adam's step on values, in `keras.ops` (every backend): `(step, new m, new v)`; where `taken` is false
    the moments stay and the step is zero."""
    first_new = ops.where(taken, beta_1 * first + (1 - beta_1) * gradient, first)
    second_new = ops.where(taken, beta_2 * second + (1 - beta_2) * ops.square(gradient), second)
    step = ops.where(taken, step_size * first_new / (ops.sqrt(second_new) + epsilon), ops.zeros_like(first_new))
    return step, first_new, second_new
