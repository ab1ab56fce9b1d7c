"""Adagrad as TF1's `AdagradOptimizer` (the original recipe's optimizer), with sparse row updates."""
from keras import ops

from bilm.optimizers.base import Optimizer
from bilm.optimizers.dense_update import dense_update
from bilm.optimizers.gradients import scaled
from bilm.utils.lazy_tensorflow import tf

INITIAL_ACCUMULATOR_VALUE = 1.0


class SparseAdagrad(Optimizer):
    """Adagrad on `tf.Variable`s as TF1's `AdagradOptimizer` (no epsilon).

    `accum += g * g; var -= learning_rate * g / sqrt(accum)`. An
    `IndexedSlices` gradient (deduplicated) updates only its rows of the
    variable and of the accumulator, so the cost of a step does not grow
    with the vocabulary.

    Args:
        variables: `{name: tf.Variable}`; accumulators are created for each,
            in the current distribution scope.
        learning_rate: float.
        initial_accumulator_value: float (the original's 1.0).

    Attributes:
        accumulators: `{name: tf.Variable}`, the optimizer's slots.
    """

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

    def __init__(self, variables, learning_rate, initial_accumulator_value=INITIAL_ACCUMULATOR_VALUE):
        self.learning_rate = learning_rate
        self.initial_accumulator_value = initial_accumulator_value
        self.accumulators = {}
        for name, variable in variables.items():
            self.accumulators[name] = tf.Variable(
                lambda v=variable: tf.fill(v.shape, tf.constant(initial_accumulator_value, v.dtype)),
                trainable=False, name=name.replace("/", "_") + "_adagrad")

    def slots(self, name):
        return (self.accumulators[name],)

    def update(self, variable, gradient, accumulator, gradient_scale=1.0):
        lr = tf.constant(self.learning_rate, variable.dtype)
        scale = tf.cast(gradient_scale, variable.dtype)
        if isinstance(gradient, tf.IndexedSlices):
            indices, values = gradient.indices, scaled(gradient.values, scale)
            step, accumulated = adagrad_rule(values, tf.gather(accumulator, indices), lr)
            accumulator.scatter_update(tf.IndexedSlices(accumulated, indices))
            return variable.scatter_sub(tf.IndexedSlices(step, indices))
        return _dense_adagrad_update(variable, accumulator, gradient, lr, scale)


def _dense_adagrad_update(variable, accumulator, gradient, learning_rate, gradient_scale):
    """The dense Adagrad step, with the gradient's scaling (`_dense_adagrad_values`,
    one compiled pass for a large variable: see `dense_update`)."""
    # Tensors in, tensors out: under MirroredStrategy, variables passed into
    # the compiled function and assigned there came out wrong.
    accumulator_value, variable_value = _dense_adagrad_values(
        tf.convert_to_tensor(accumulator), tf.convert_to_tensor(variable), gradient, learning_rate,
        gradient_scale)
    accumulator.assign(accumulator_value)
    return variable.assign(variable_value)


@dense_update
def _dense_adagrad_values(accumulator, variable, gradient, learning_rate, gradient_scale):
    step, accumulator = adagrad_rule(scaled(gradient, gradient_scale), accumulator, learning_rate)
    return accumulator, variable - step


def adagrad_rule(gradient, accumulator, learning_rate):
    """Adagrad's step on values, in `keras.ops` (every backend): `(step, new accumulator)`, `accum += g * g`,
    `step = learning_rate * g / sqrt(accum)`."""
    accumulator = accumulator + gradient * gradient
    return learning_rate * gradient * ops.rsqrt(accumulator), accumulator
