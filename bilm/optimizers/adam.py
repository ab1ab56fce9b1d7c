"""Adam (Kingma and Ba), lazy on sparse rows: bilm's opt-in optimizer."""
from keras import ops

from bilm.optimizers.base import Optimizer
from bilm.optimizers.dense_update import dense_update
from bilm.optimizers.gradients import scaled
from bilm.utils.lazy_tensorflow import tf


class SparseAdam(Optimizer):
    """Adam on `tf.Variable`s, lazy on sparse rows.

    `m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)`, with
    `t` the steps taken. An `IndexedSlices` gradient (deduplicated) updates
    only its rows of the variable and of both moments (the moments of rows
    it does not touch keep their values, as in "lazy" Adam), so the cost of a
    step does not grow with the vocabulary. A step with `gradient_scale` 0
    changes nothing, not even the moments or `t`.

    Args:
        variables: `{name: tf.Variable}`; moments are created for each, in
            the current distribution scope.
        learning_rate, beta_1, beta_2, epsilon: floats.

    Attributes:
        accumulators: `{name + "/m" or "/v": tf.Variable, "iterations": int64
            variable}`, the optimizer's state (what a checkpoint holds).
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

    def __init__(self, variables, learning_rate, beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON):
        self.learning_rate = learning_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="adam_iterations")
        self.accumulators = {"iterations": self.iterations}
        for name, variable in variables.items():
            for moment in ("m", "v"):
                self.accumulators[f"{name}/{moment}"] = tf.Variable(
                    lambda v=variable: tf.zeros(v.shape, v.dtype), trainable=False,
                    name=name.replace("/", "_") + f"_adam_{moment}")

    def slots(self, name):
        return self.accumulators[f"{name}/m"], self.accumulators[f"{name}/v"]

    def _step_size(self, variable, taken):
        t = tf.cast(self.iterations + taken, variable.dtype)
        return adam_step_size(self.learning_rate, tf.constant(self.beta_1, variable.dtype),
                              tf.constant(self.beta_2, variable.dtype), t)

    def update(self, variable, gradient, first, second, gradient_scale=1.0):
        scale = tf.cast(gradient_scale, variable.dtype)
        taken = tf.cast(scale > 0, tf.int64)  # this step counts when it is taken
        step_size = self._step_size(variable, taken)
        b1, b2 = tf.constant(self.beta_1, variable.dtype), tf.constant(self.beta_2, variable.dtype)
        if isinstance(gradient, tf.IndexedSlices):
            indices, values = gradient.indices, scaled(gradient.values, scale)
            step, m_new, v_new = adam_rule(values, tf.gather(first, indices), tf.gather(second, indices), scale > 0,
                                           step_size, b1, b2, tf.constant(self.epsilon, variable.dtype))
            first.scatter_update(tf.IndexedSlices(m_new, indices))
            second.scatter_update(tf.IndexedSlices(v_new, indices))
            return variable.scatter_sub(tf.IndexedSlices(step, indices))
        # Tensors in and out (as adagrad's dense update); one compiled pass for a large variable.
        m_new, v_new, variable_value = _dense_adam_values(
            tf.convert_to_tensor(first), tf.convert_to_tensor(second), tf.convert_to_tensor(variable), gradient,
            scale, step_size, b1, b2, tf.constant(self.epsilon, variable.dtype))
        first.assign(m_new)
        second.assign(v_new)
        return variable.assign(variable_value)

    def finish_step(self, strategy, gradient_scale):
        # After the variables (which read it): one more step where this one was taken.
        strategy.extended.update(
            self.iterations, lambda iterations, scale: iterations.assign_add(tf.cast(scale > 0, tf.int64)),
            args=(gradient_scale,), group=False)


@dense_update
def _dense_adam_values(first, second, variable, gradient, scale, step_size, beta_1, beta_2, epsilon):
    step, first_new, second_new = adam_rule(scaled(gradient, scale), first, second, scale > 0, step_size, beta_1,
                                            beta_2, epsilon)
    return first_new, second_new, variable - step


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
